import { spawnSync } from 'node:child_process';
import { cpSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { parseAllDocuments } from 'yaml';
import { loadServeConfig } from '../../src/server/config.js';
import type { ServeConfig } from '../../src/server/options.js';
import { SETTINGS } from '../../src/server/options.js';

const root = fileURLToPath(new URL('../..', import.meta.url));
const defaultOf = (key: string) => SETTINGS.find((setting) => setting.key === key)?.default;

// biome-ignore lint/suspicious/noExplicitAny: parsed YAML, whose every field the tests check by name
type Parsed = any;
type Manifest = {
  kind: string;
  metadata: { name: string };
  spec?: Parsed;
  data?: Record<string, string>;
  [field: string]: Parsed;
};
const manifests = parseAllDocuments(readFileSync(join(root, 'deploy/kubernetes/proxy/disagg.yaml'), 'utf8')).map(
  (document) => document.toJSON() as Manifest,
);
// The ConfigMap, as kustomization.yaml's configMapGenerator makes it of the configuration file.
const configFile = join(root, 'deploy/kubernetes/proxy/config/disagg.yaml');
const of = (kind: string) => manifests.find((manifest) => manifest.kind === kind) as Manifest;

describe('the Kubernetes manifests agree with the proxy', () => {
  const deployment = of('Deployment');
  const pod = deployment.spec.template.spec;
  const container = pod.containers[0];
  // The configuration the pod mounts, as disagg serve reads it.
  const mount = container.volumeMounts.find((volume: { name: string }) => volume.name === 'config');
  const fileName = 'disagg.yaml';
  const config = loadServeConfig(['--config', configFile], {}) as ServeConfig;

  it("fronts more than one model: the main pods serve every model but the pools', each pool found by its own labels", () => {
    expect(config.discovery.decodeSelector).toBe('app=vllm,role=decode');
    expect(config.pools.map((pool) => [pool.model, pool.decodeSelector, pool.prefill])).toEqual([
      [['qwen3-1.7b'], 'app=vllm,role=decode-small', []],
      [['bge-m3'], 'app=vllm,role=embed', []],
    ]);
  });

  it('the container runs the config file it mounts, on the port it exposes', () => {
    const configArg = container.args[container.args.indexOf('--config') + 1];
    expect(configArg).toBe(`${mount.mountPath}/${fileName}`);
    expect(container.ports[0].containerPort).toBe(config.port);
    const service = of('Service');
    expect(service.spec.ports[0].targetPort).toBe(container.ports[0].name);
    expect(service.spec.selector).toEqual(deployment.spec.selector.matchLabels);
  });

  it('metrics on a port of their own, annotated for scraping and not behind the Service; the Service keeps a client on one replica', () => {
    const metricsPort = container.ports.find((each: { name: string }) => each.name === 'metrics');
    expect(metricsPort.containerPort).toBe(config.metricsPort);
    expect(deployment.spec.template.metadata.annotations).toMatchObject({
      'prometheus.io/scrape': 'true',
      'prometheus.io/port': String(config.metricsPort),
    });
    const service = of('Service');
    expect(service.spec.ports.map((each: { targetPort: string }) => each.targetPort)).toEqual(['http']);
    // cache-aware routing learns per replica (the ConfigMap's prefillPolicy).
    expect(config.prefillPolicy).toBe('cache-aware');
    expect(service.spec.sessionAffinity).toBe('ClientIP');
  });

  it('memory sized to the default admission, with V8 told to collect before the kernel kills', () => {
    const mib = (quantity: string) => {
      const match = /^(\d+)(Mi|Gi)$/.exec(quantity);
      if (match === null) throw new Error(`not a Mi or Gi quantity: ${quantity}`);
      return Number(match[1]) * (match[2] === 'Gi' ? 1024 : 1);
    };
    const limit = mib(container.resources.limits.memory);
    // The measured need at the defaults (npm run memory): 215 MiB with 1,024 streaming and
    // 1,024 queued, plus about 24 MiB per body near the limit being parsed. The defaults the
    // measurement assumed are the ones the pod runs.
    expect([config.maxConcurrentRequests, config.queueSize, config.maxBodyBytes]).toEqual([
      defaultOf('maxConcurrentRequests'),
      defaultOf('queueSize'),
      defaultOf('maxBodyBytes'),
    ]);
    expect(limit).toBeGreaterThanOrEqual(215 + 16 * 24);
    expect(mib(container.resources.requests.memory)).toBeGreaterThanOrEqual(128);
    const nodeOptions = container.env.find((each: { name: string }) => each.name === 'NODE_OPTIONS')?.value ?? '';
    const heap = Number(/--max-old-space-size=(\d+)/.exec(nodeOptions)?.[1]);
    // Room outside the heap for buffers, sockets and the code itself.
    expect(heap).toBeGreaterThan(0);
    expect(heap).toBeLessThanOrEqual(limit * 0.8);
  });

  it('a startup probe gives the first round of worker probes time before liveness counts; a disruption takes one replica at a time', () => {
    expect(container.startupProbe.httpGet).toEqual({ path: '/health', port: 'http' });
    expect(container.startupProbe.periodSeconds * container.startupProbe.failureThreshold).toBeGreaterThanOrEqual(60);
    const budget = of('PodDisruptionBudget');
    expect(budget.spec.selector.matchLabels).toEqual(deployment.spec.selector.matchLabels);
    expect(budget.spec.maxUnavailable).toBe(1);
    expect(deployment.spec.replicas).toBeGreaterThan(budget.spec.maxUnavailable);
  });

  it('the pod may list and watch the pods its discovery selects, in the namespace it watches, and nothing else', () => {
    expect(config.discovery.prefillSelector).toBeDefined();
    expect(config.discovery.decodeSelector).toBeDefined();
    const role = of('Role');
    const binding = of('RoleBinding');
    const account = of('ServiceAccount');
    expect(pod.serviceAccountName).toBe(account.metadata.name);
    expect(binding.subjects).toEqual([
      { kind: 'ServiceAccount', name: account.metadata.name, namespace: config.discovery.namespace },
    ]);
    expect(binding.roleRef).toEqual({ apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: role.metadata.name });
    expect((role as Manifest & { rules: unknown }).rules).toEqual([
      { apiGroups: [''], resources: ['pods'], verbs: ['get', 'list', 'watch'] },
    ]);
    for (const manifest of manifests) {
      expect((manifest.metadata as { namespace?: string }).namespace, manifest.kind).toBe(config.discovery.namespace);
    }
  });

  it('liveness on /health, readiness on /ready, and readiness fails within the drain delay', () => {
    expect(container.livenessProbe.httpGet.path).toBe('/health');
    expect(container.readinessProbe.httpGet.path).toBe('/ready');
    const { periodSeconds, failureThreshold } = container.readinessProbe;
    expect(periodSeconds * failureThreshold * 1000).toBeLessThan(config.drainDelayMs);
  });

  it('the termination grace period covers the drain delay and the grace period of requests under way', () => {
    expect(pod.terminationGracePeriodSeconds * 1000).toBeGreaterThan(config.drainDelayMs + config.gracePeriodMs);
    // The ConfigMap states them as the CLI's defaults.
    expect([config.drainDelayMs, config.gracePeriodMs]).toEqual([
      defaultOf('drainDelayMs'),
      defaultOf('gracePeriodMs'),
    ]);
    expect(pod.securityContext.runAsNonRoot).toBe(true);
  });
});

describe('the Dockerfile', () => {
  const dockerfile = readFileSync(join(root, 'deploy/Dockerfile'), 'utf8');
  const final = dockerfile.slice(dockerfile.lastIndexOf('\nFROM '));

  it('starts node itself (signals reach the proxy), as a non-root user, exposing the default port', () => {
    expect(final).toMatch(/^ENTRYPOINT \["node", (".+", )*"dist\/cli\.js"\]$/m);
    expect(final).not.toMatch(/npx|npm (start|run)/);
    expect(final).toMatch(/^USER 1000:1000$/m); // by number: a kubelet checks runAsNonRoot on a UID
    expect(final).toMatch(new RegExp(`^EXPOSE ${defaultOf('port')}$`, 'm'));
  });

  it("gives node only flags this Node accepts (a mistyped V8 flag would stop the image's every start)", () => {
    const flags = JSON.parse(/^ENTRYPOINT (\[.*\])$/m.exec(final)?.[1] ?? '[]').slice(1, -1) as string[];
    expect(flags).toContain('--liftoff-only');
    expect(flags).toContain('--no-maglev');
    const run = spawnSync(process.execPath, [...flags, '-e', 'process.stdout.write("started")'], { encoding: 'utf8' });
    expect(run.stderr).toBe('');
    expect(run.stdout).toBe('started');
  });

  it("caps V8's young generation, and the pod, which sets NODE_OPTIONS itself, caps it alike", () => {
    const image = /^ENV NODE_OPTIONS=(.+)$/m.exec(final)?.[1] ?? '';
    const semi = /--max-semi-space-size=(\d+)/.exec(image)?.[1];
    expect(Number(semi)).toBeGreaterThan(0);
    const container = of('Deployment').spec.template.spec.containers[0];
    const pod = container.env.find((each: { name: string }) => each.name === 'NODE_OPTIONS')?.value ?? '';
    expect(pod).toContain(`--max-semi-space-size=${semi}`);
  });

  // The image is Debian's (glibc) Linux: the step is run where its binary would load.
  it.runIf(process.platform === 'linux')(
    "keeps the native tokenizer's binary for its own platform only, and the tokenizer still loads",
    () => {
      // The build stage's step, run as the image runs it on a copy of the installed package.
      const step = /^RUN (keep=.*\\\n.*)$/m.exec(dockerfile)?.[1]?.replace(/\\\n/g, ' ');
      expect(step).toBeDefined();
      const dir = mkdtempSync(join(tmpdir(), 'disagg-image-'));
      cpSync(join(root, 'node_modules/tokenizers'), join(dir, 'node_modules/tokenizers'), { recursive: true });
      const run = spawnSync('sh', ['-c', step as string], { cwd: dir, encoding: 'utf8' });
      expect(run.status, run.stderr).toBe(0);
      const binaries = readdirSync(join(dir, 'node_modules/tokenizers')).filter((name) => name.endsWith('.node'));
      expect(binaries).toEqual([`tokenizers.linux-${process.arch}-gnu.node`]);
      const load = spawnSync(process.execPath, ['-e', 'console.log(typeof require("tokenizers").Tokenizer.fromFile)'], {
        cwd: dir,
        encoding: 'utf8',
      });
      expect(load.stdout.trim()).toBe('function');
      rmSync(dir, { recursive: true, force: true });
    },
  );

  it('builds in a stage of its own and ships only the production dependencies and the build', () => {
    expect(dockerfile.match(/^FROM /gm)).toHaveLength(2);
    expect(dockerfile).toMatch(/npm prune --omit=dev/);
    expect(final).not.toMatch(/COPY src|COPY \. /);
  });
});

describe('the pod starts under the Pod Security "restricted" level', () => {
  const deployment = of('Deployment');
  const pod = deployment.spec.template.spec;
  const dockerfile = readFileSync(join(root, 'deploy/Dockerfile'), 'utf8');

  it('non-root by number, in the image and the pod (a kubelet cannot check a user name against runAsNonRoot)', () => {
    const user = /^USER\s+(\S+)/m.exec(dockerfile)?.[1] ?? '';
    expect(user).toMatch(/^\d+(:\d+)?$/);
    expect(Number(user.split(':')[0])).toBeGreaterThan(0);
    expect(pod.securityContext).toMatchObject({ runAsNonRoot: true, runAsUser: Number(user.split(':')[0]) });
  });

  it("every container: no privilege escalation, every capability dropped, the runtime's seccomp profile, a read-only root", () => {
    for (const container of pod.containers) {
      const context = container.securityContext;
      expect(context.allowPrivilegeEscalation, container.name).toBe(false);
      expect(context.capabilities.drop, container.name).toEqual(['ALL']);
      expect(context.capabilities.add ?? [], container.name).toEqual([]);
      expect(context.readOnlyRootFilesystem, container.name).toBe(true);
      const seccomp = context.seccompProfile?.type ?? pod.securityContext.seccompProfile?.type;
      expect(['RuntimeDefault', 'Localhost']).toContain(seccomp);
      expect(context.privileged ?? false).toBe(false);
      expect(context.runAsUser ?? pod.securityContext.runAsUser).not.toBe(0);
    }
    // Nothing the restricted level forbids at the pod's level either.
    expect(pod.hostNetwork ?? false).toBe(false);
    expect(pod.hostPID ?? false).toBe(false);
    expect(pod.hostIPC ?? false).toBe(false);
    const allowed = new Set([
      'configMap',
      'emptyDir',
      'projected',
      'secret',
      'downwardAPI',
      'persistentVolumeClaim',
      'ephemeral',
      'csi',
    ]);
    for (const volume of pod.volumes)
      expect(
        Object.keys(volume)
          .filter((key) => key !== 'name')
          .every((key) => allowed.has(key)),
      ).toBe(true);
  });
});
