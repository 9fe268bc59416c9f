// deploy/kubernetes/gateway-api, rendered as `kubectl apply -k` would and checked against what
// `disagg epp` and `disagg sidecar` read and serve: the pool targets the sidecars' port, the
// picker's ports and health services are the ones it has, the Envoy configuration calls it as
// the picker expects.
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { parse, parseAllDocuments } from 'yaml';
import { EPP_DEFAULTS, HEALTH_SERVICES } from '../../src/epp/epp-server.js';
import { DESTINATION_HEADER, EXT_PROC_SERVICE } from '../../src/epp/ext-proc-wire.js';
import { loadServeConfig, type ServeConfig } from '../../src/server/config.js';
import { run, tool } from '../support/tools.js';

const root = fileURLToPath(new URL('../..', import.meta.url));
const kubectl = tool('kubectl', 'kubernetes-client');

// biome-ignore lint/suspicious/noExplicitAny: rendered YAML, whose every field the tests check by name
type Manifest = any;

describe.skipIf(kubectl.skip)(`deploy/kubernetes/gateway-api (${kubectl.why})`, () => {
  const rendered: Manifest[] = kubectl.skip
    ? []
    : parseAllDocuments(run('kubectl', ['kustomize', join(root, 'deploy/kubernetes/gateway-api')])).map((d) =>
        d.toJSON(),
      );
  const find = (kind: string, name: string) => rendered.find((m) => m.kind === kind && m.metadata.name === name);
  const epp = find('Deployment', 'disagg-epp');
  const eppContainer = epp?.spec.template.spec.containers[0];
  const decode = find('Deployment', 'vllm-decode');
  const sidecar = decode?.spec.template.spec.containers.find((c: Manifest) => c.name === 'disagg-sidecar');
  const vllm = decode?.spec.template.spec.containers.find((c: Manifest) => c.name === 'vllm');
  const pool = find('InferencePool', 'vllm-decode');
  // The settings each command reads (epp's own ports aside: they are the defaults).
  const eppConfig = loadServeConfig(eppContainer.args.slice(1), {}) as ServeConfig;
  const sidecarConfig = loadServeConfig(['--prefill-from', 'header', ...sidecar.args.slice(1)], {}) as ServeConfig;

  it('everything lands in one namespace, the one the picker watches', () => {
    expect(new Set(rendered.map((m) => m.metadata.namespace))).toEqual(new Set(['llm']));
    expect(eppConfig.discovery.namespace).toBe('llm');
  });

  it("the picker finds its decode pods as the InferencePool's, which selects the sidecars' pods on their port and names the picker's Service and port", () => {
    expect(eppConfig.discovery.inferencePool).toBe(pool.metadata.name);
    expect(pool.spec.selector.matchLabels).toEqual(decode.spec.template.metadata.labels);
    expect(pool.spec.targetPorts).toEqual([{ number: sidecarConfig.port }]);
    expect(find('Role', 'disagg-epp').rules).toContainEqual({
      apiGroups: ['inference.networking.k8s.io'],
      resources: ['inferencepools'],
      verbs: ['get', 'list', 'watch'],
    });
    expect(eppConfig.discovery.port).toBe(sidecarConfig.port);
    const service = find('Service', pool.spec.endpointPickerRef.name);
    const grpcPort = service.spec.ports.find((p: Manifest) => p.port === pool.spec.endpointPickerRef.port.number);
    expect(grpcPort.appProtocol).toBe('kubernetes.io/h2c');
    expect(eppContainer.ports.find((p: Manifest) => p.name === grpcPort.targetPort).containerPort).toBe(
      EPP_DEFAULTS.port,
    );
    expect(service.spec.selector).toEqual(epp.spec.selector.matchLabels);
    expect(find('HTTPRoute', 'vllm').spec.rules[0].backendRefs).toEqual([
      { group: 'inference.networking.k8s.io', kind: 'InferencePool', name: 'vllm-decode' },
    ]);
  });

  it("the picker's probes ask gRPC health services it serves, on its health port", () => {
    const health = eppContainer.ports.find((p: Manifest) => p.name === 'grpc-health').containerPort;
    expect(health).toBe(EPP_DEFAULTS.healthPort);
    for (const probe of [eppContainer.livenessProbe, eppContainer.readinessProbe]) {
      expect(probe.grpc.port).toBe(health);
      expect(HEALTH_SERVICES).toContain(probe.grpc.service);
    }
    expect(eppContainer.ports.find((p: Manifest) => p.name === 'metrics').containerPort).toBe(EPP_DEFAULTS.metricsPort);
    // Its Role lets discovery watch the pods.
    expect(find('Role', 'disagg-epp').rules[0]).toMatchObject({ resources: ['pods'], verbs: ['get', 'list', 'watch'] });
  });

  it('the sidecar fronts the vLLM beside it and calls prefill pods only in the pod network', () => {
    expect(new URL(sidecarConfig.decode[0]?.url as string).port).toBe(String(vllm.ports[0].containerPort));
    expect(sidecarConfig.sidecar.prefillAllow).toEqual(['10.0.0.0/8']);
    expect(sidecar.ports[0].containerPort).toBe(sidecarConfig.port);
  });

  it('the standalone Envoy is >= 1.33, calls the picker full-duplex at its Service, and routes by its header', () => {
    const envoy = find('Deployment', 'envoy').spec.template.spec.containers[0];
    const [major, minor] = (/v(\d+)\.(\d+)/.exec(envoy.image) ?? []).slice(1).map(Number);
    expect((major as number) * 100 + (minor as number)).toBeGreaterThanOrEqual(133);
    const config = parse(find('ConfigMap', 'envoy').data['envoy.yaml']);
    const manager = config.static_resources.listeners[0].filter_chains[0].filters[0].typed_config;
    const extProc = manager.http_filters.find((f: Manifest) => f.name === 'envoy.filters.http.ext_proc').typed_config;
    expect(extProc.processing_mode).toEqual({
      request_header_mode: 'SEND',
      response_header_mode: 'SEND',
      request_body_mode: 'FULL_DUPLEX_STREAMED',
      response_body_mode: 'FULL_DUPLEX_STREAMED',
      request_trailer_mode: 'SEND',
      response_trailer_mode: 'SEND',
    });
    const clusters = config.static_resources.clusters;
    const picked = clusters.find((c: Manifest) => c.type === 'ORIGINAL_DST');
    expect(picked.original_dst_lb_config).toEqual({ use_http_header: true, http_header_name: DESTINATION_HEADER });
    expect(manager.route_config.virtual_hosts[0].routes[0].route.cluster).toBe(picked.name);
    const eppCluster = clusters.find((c: Manifest) => c.name === extProc.grpc_service.envoy_grpc.cluster_name);
    const address = eppCluster.load_assignment.endpoints[0].lb_endpoints[0].endpoint.address.socket_address;
    expect(address).toEqual({ address: 'disagg-epp.llm.svc.cluster.local', port_value: EPP_DEFAULTS.port });
    expect(eppCluster.health_checks[0].grpc_health_check.service_name).toBe(EXT_PROC_SERVICE);
  });
});
