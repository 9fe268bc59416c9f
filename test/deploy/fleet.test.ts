// deploy/kubernetes/overlays: a whole fleet per engine, rendered as `kubectl apply -k` would,
// and checked against what `disagg serve` reads from the configuration it mounts: its
// selectors find the worker pods, the ports agree (HTTP, KV events, SGLang's bootstrap), the
// model is named once, the images are the releases docs/compatibility.md states, and no key
// sits in a ConfigMap.
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { parse, parseAllDocuments } from 'yaml';
import { loadServeConfig, type ServeConfig } from '../../src/server/config.js';
import { parseTenants } from '../../src/tenancy/tenants.js';
import { run, tool } from '../support/tools.js';

const root = fileURLToPath(new URL('../..', import.meta.url));
const kubectl = tool('kubectl', 'kubernetes-client');

// biome-ignore lint/suspicious/noExplicitAny: rendered YAML, whose every field the tests check by name
type Manifest = any;

const render = (path: string): Manifest[] =>
  parseAllDocuments(run('kubectl', ['kustomize', join(root, path)])).map((document) => document.toJSON());

/** `app=vllm,role=prefill` as the labels it requires (equality selectors are all the manifests use). */
const selectorLabels = (selector: string) =>
  Object.fromEntries(selector.split(',').map((term) => term.split('=').map((part) => part.trim())));

const matches = (selector: string, labels: Record<string, string>) =>
  Object.entries(selectorLabels(selector)).every(([key, value]) => labels[key] === value);

/** The value of `--name=value` among a container's args. */
const arg = (container: Manifest, name: string): string | undefined =>
  (container.args as string[]).find((each) => each.startsWith(`${name}=`))?.slice(name.length + 1);

const portOf = (endpoint: string) => Number(/^tcp:\/\/\*:(\d+)$/.exec(endpoint)?.[1]);

/** The engines' images as docs/compatibility.md's "Checked against" table states them. */
const checkedImages = () => {
  const doc = readFileSync(join(root, 'docs/compatibility.md'), 'utf8');
  const table = doc.slice(doc.indexOf('## Checked against'), doc.indexOf('## Per feature'));
  return new Map(
    [...table.matchAll(/^\| (vLLM|SGLang) \| ([\d.]+) \| `([^`]+)` \|$/gm)].map((row) => [
      row[1] === 'vLLM' ? 'vllm' : 'sglang',
      { release: row[2], image: row[3] },
    ]),
  );
};

const SECRET_SETTINGS = ['DISAGG_API_KEY', 'DISAGG_ADMIN_KEY', 'DISAGG_WORKER_API_KEY'];

describe.skipIf(kubectl.skip)(`deploy/kubernetes/overlays (${kubectl.why})`, () => {
  for (const engine of ['vllm', 'sglang'] as const) {
    describe(engine, () => {
      const rendered = kubectl.skip ? [] : render(`deploy/kubernetes/overlays/${engine}`);
      const deployment = (name: string) => rendered.find((m) => m.kind === 'Deployment' && m.metadata.name === name);
      const proxy = deployment('disagg');
      const proxyContainer = proxy?.spec.template.spec.containers[0];
      const prefill = deployment('prefill-workers');
      const decode = deployment('decode-workers');
      const workerContainer = (workers: Manifest) => workers.spec.template.spec.containers[0];
      const configMaps = rendered.filter((m) => m.kind === 'ConfigMap');
      const modelMap = configMaps.find((m) => m.metadata.name.startsWith(`${engine}-model-`));
      // The proxy's environment as the kubelet gives it: Secret values stand in, ConfigMap values resolved.
      const env = Object.fromEntries(
        (proxyContainer?.env ?? []).map((each: Manifest) => {
          const fromMap = each.valueFrom?.configMapKeyRef;
          if (fromMap !== undefined) {
            return [each.name, configMaps.find((m) => m.metadata.name === fromMap.name)?.data[fromMap.key]];
          }
          return [each.name, each.valueFrom?.secretKeyRef === undefined ? each.value : 'secret-value'];
        }),
      );
      const configVolume = proxy?.spec.template.spec.volumes.find((v: Manifest) => v.name === 'config');
      const configMap = configMaps.find((m) => m.metadata.name === configVolume?.configMap.name);
      const dir = mkdtempSync(join(tmpdir(), `disagg-fleet-${engine}-`));
      writeFileSync(join(dir, 'disagg.yaml'), configMap?.data['disagg.yaml'] ?? '');
      const config = loadServeConfig(['--config', join(dir, 'disagg.yaml')], env) as ServeConfig;

      it('the proxy runs the connector of its workers, in their namespace', () => {
        expect(config.connector).toBe(engine);
        expect(new Set(rendered.map((m) => m.metadata.namespace))).toEqual(new Set([config.discovery.namespace]));
      });

      it("the proxy's selectors find the prefill and the decode pods, each only its own", () => {
        const prefillLabels = prefill.spec.template.metadata.labels;
        const decodeLabels = decode.spec.template.metadata.labels;
        const { prefillSelector, decodeSelector } = config.discovery;
        expect(matches(prefillSelector as string, prefillLabels)).toBe(true);
        expect(matches(prefillSelector as string, decodeLabels)).toBe(false);
        expect(matches(decodeSelector as string, decodeLabels)).toBe(true);
        expect(matches(decodeSelector as string, prefillLabels)).toBe(false);
        for (const workers of [prefill, decode]) {
          expect(workers.spec.selector.matchLabels).toEqual(workers.spec.template.metadata.labels);
        }
        expect(config.pools).toEqual([]);
      });

      it('the proxy calls each role on the port its engine serves, where its probes look', () => {
        for (const [workers, port] of [
          [prefill, config.discovery.prefillPort ?? config.discovery.port],
          [decode, config.discovery.decodePort ?? config.discovery.port],
        ]) {
          const container = workerContainer(workers);
          expect(Number(arg(container, '--port'))).toBe(port);
          expect(container.ports.find((p: Manifest) => p.name === 'http').containerPort).toBe(port);
          for (const probe of ['startupProbe', 'livenessProbe', 'readinessProbe']) {
            expect(container[probe].httpGet, probe).toEqual({ path: '/health', port: 'http' });
          }
          expect(container.startupProbe.periodSeconds * container.startupProbe.failureThreshold).toBeGreaterThanOrEqual(
            600,
          );
          expect(container.resources.limits['nvidia.com/gpu']).toBe('1');
        }
      });

      it('every worker publishes its KV cache events where the proxy listens for them', () => {
        expect(config.prefillPolicy).toBe('precise-prefix');
        for (const workers of [prefill, decode]) {
          const container = workerContainer(workers);
          const events = JSON.parse(arg(container, '--kv-events-config') ?? '{}');
          expect(events.publisher).toBe('zmq');
          expect(portOf(events.endpoint)).toBe(config.kvEvents.port);
          expect(portOf(events.replay_endpoint)).toBe(config.kvEvents.replayPort);
          expect(events.topic).toBe(config.kvEvents.topic);
          if (engine === 'vllm') expect(events.enable_kv_cache_events).toBe(true);
          else expect(arg(container, '--page-size')).toBe('16');
        }
      });

      it('the KV moves between pods: the transfer flags, and the address each pod gives its peers is its own IP', () => {
        for (const [workers, role] of [
          [prefill, 'prefill'],
          [decode, 'decode'],
        ]) {
          const container = workerContainer(workers);
          const hostVariable = engine === 'vllm' ? 'VLLM_NIXL_SIDE_CHANNEL_HOST' : 'SGLANG_HOST_IP';
          expect(container.env.find((e: Manifest) => e.name === hostVariable).valueFrom).toEqual({
            fieldRef: { fieldPath: 'status.podIP' },
          });
          if (engine === 'vllm') {
            const transfer = JSON.parse(arg(container, '--kv-transfer-config') ?? '{}');
            expect([transfer.kv_connector, transfer.kv_role]).toEqual(['NixlConnector', 'kv_both']);
            expect(container.args).toContain('--enable-prompt-tokens-details');
          } else {
            expect(arg(container, '--disaggregation-mode')).toBe(role);
            expect(arg(container, '--disaggregation-transfer-backend')).toBeDefined();
            expect(container.args).toContain('--enable-cache-report');
          }
        }
      });

      it.runIf(engine === 'sglang')(
        "a prefill pod's bootstrap port, as the proxy reads it from its annotation, is the one its server listens on",
        () => {
          const annotations = prefill.spec.template.metadata.annotations ?? {};
          const annotated = Number(annotations[config.discovery.bootstrapPortAnnotation]);
          expect(annotated).toBe(Number(arg(workerContainer(prefill), '--disaggregation-bootstrap-port')));
          expect(annotated).toBe(config.bootstrapPort);
          expect(arg(workerContainer(decode), '--disaggregation-bootstrap-port')).toBeUndefined();
        },
      );

      it('the model is named once: the workers and the proxy tokenizer read it from one ConfigMap', () => {
        const model = modelMap.data.MODEL;
        expect(model).toMatch(/^[\w.-]+\/[\w.-]+$/);
        for (const workers of [prefill, decode]) {
          const container = workerContainer(workers);
          expect(container.env.find((e: Manifest) => e.name === 'MODEL').valueFrom.configMapKeyRef).toEqual({
            name: modelMap.metadata.name,
            key: 'MODEL',
          });
          expect(container.args.join(' ')).toContain('$(MODEL)');
        }
        expect(env.DISAGG_TOKENIZER).toBe(model);
        expect(config.tokenizer?.dir).toBe(model);
        const elsewhere = rendered.filter((m) => m !== modelMap && JSON.stringify(m).includes(model));
        expect(elsewhere.map((m) => `${m.kind}/${m.metadata.name}`)).toEqual([]);
      });

      it('the worker images are the release docs/compatibility.md was checked against', () => {
        const checked = checkedImages().get(engine);
        expect(checked?.image).toMatch(new RegExp(`:v${String(checked?.release).replaceAll('.', '\\.')}$`));
        for (const workers of [prefill, decode]) expect(workerContainer(workers).image).toBe(checked?.image);
      });

      it('the proxy image is the release of this package', () => {
        const { version } = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));
        expect(proxyContainer.image.split(':').at(-1)).toBe(version);
      });

      it('no key in a ConfigMap: the keys come from the Secret, the tenants file from a Secret volume', () => {
        expect(rendered.filter((m) => m.kind === 'Secret')).toEqual([]);
        const fromFileAlone = loadServeConfig(['--config', join(dir, 'disagg.yaml')], {}) as ServeConfig;
        expect([fromFileAlone.apiKey, fromFileAlone.adminKey, fromFileAlone.workerApiKey]).toEqual([
          undefined,
          undefined,
          undefined,
        ]);
        expect(fromFileAlone.tenantsFile).toBeUndefined();
        for (const map of configMaps) {
          for (const text of Object.values(map.data ?? {}) as string[]) {
            expect(text).not.toMatch(/\b(apiKey|adminKey|workerApiKey|tenantsFile|keys)\s*:/);
            expect(text).not.toMatch(/REPLACE-ME|hf_/);
          }
        }
        for (const name of SECRET_SETTINGS) {
          const entry = proxyContainer.env.find((e: Manifest) => e.name === name);
          expect(entry?.valueFrom.secretKeyRef.name, name).toBe('disagg-keys');
        }
        expect(config.apiKey).toBe('secret-value');
        const tenantsFile = config.tenantsFile as string;
        // The deepest mount holding the file (the config's /etc/disagg holds the tenants' folder).
        const mount = proxyContainer.volumeMounts
          .filter((m: Manifest) => tenantsFile.startsWith(`${m.mountPath}/`))
          .sort((a: Manifest, b: Manifest) => b.mountPath.length - a.mountPath.length)[0];
        const volume = proxy.spec.template.spec.volumes.find((v: Manifest) => v.name === mount.name);
        expect(volume.secret.secretName).toBe('disagg-keys');
        expect(volume.secret.items).toEqual([
          { key: 'tenants.yaml', path: tenantsFile.slice(mount.mountPath.length + 1) },
        ]);
        for (const container of [proxyContainer, workerContainer(prefill), workerContainer(decode)]) {
          const token = container.env.find((e: Manifest) => e.name === 'HF_TOKEN');
          expect(token.valueFrom.secretKeyRef, container.name).toMatchObject({ name: 'hf-token', key: 'token' });
        }
      });
    });
  }

  describe('the proxy alone (deploy/kubernetes)', () => {
    const rendered = kubectl.skip ? [] : render('deploy/kubernetes');
    const proxy = rendered.find((m) => m.kind === 'Deployment');
    const pod = proxy?.spec.template.spec;
    const container = pod?.containers[0];

    it('its configuration is a ConfigMap named by its content, so an edit rolls the pods', () => {
      const configMap = rendered.find((m) => m.kind === 'ConfigMap');
      expect(configMap.metadata.name).toMatch(/^disagg-[a-z0-9]{10}$/);
      expect(pod.volumes.find((v: Manifest) => v.name === 'config').configMap.name).toBe(configMap.metadata.name);
    });

    it('two replicas spread over nodes and zones, and still schedule on one node', () => {
      const spread = pod.topologySpreadConstraints;
      expect(spread.map((c: Manifest) => c.topologyKey)).toEqual([
        'kubernetes.io/hostname',
        'topology.kubernetes.io/zone',
      ]);
      for (const constraint of spread) {
        expect(constraint.labelSelector.matchLabels).toEqual(proxy.spec.selector.matchLabels);
        expect(constraint.whenUnsatisfiable).toBe('ScheduleAnyway');
      }
    });

    it('readiness forgives one slow answer', () => {
      expect(container.readinessProbe.failureThreshold).toBeGreaterThanOrEqual(2);
      expect(container.readinessProbe.timeoutSeconds).toBeGreaterThanOrEqual(2);
    });

    it("the tokenizer's download has a writable cache beside a read-only root", () => {
      const home = container.env.find((e: Manifest) => e.name === 'HF_HOME').value;
      const mount = container.volumeMounts.find((m: Manifest) => m.mountPath === home);
      expect(pod.volumes.find((v: Manifest) => v.name === mount.name).emptyDir).toBeDefined();
      expect(container.securityContext.readOnlyRootFilesystem).toBe(true);
    });
  });
});

describe('deploy/kubernetes/secret.example.yaml', () => {
  const text = readFileSync(join(root, 'deploy/kubernetes/secret.example.yaml'), 'utf8');
  const secrets = parseAllDocuments(text).map((document) => document.toJSON() as Manifest);

  it('is clearly to be replaced, and no kustomization applies it', () => {
    for (const secret of secrets) {
      for (const [key, value] of Object.entries(secret.stringData as Record<string, string>)) {
        expect(value, key).toContain('REPLACE-ME');
      }
    }
    const kustomizations = run('git', ['ls-files', '*kustomization.yaml'], { cwd: root }).trim().split('\n');
    for (const file of kustomizations) {
      expect(readFileSync(join(root, file), 'utf8'), file).not.toMatch(/^\s*-\s*\S*secret\.example\.yaml/m);
    }
  });

  it('holds every key the manifests require, and a tenants file the proxy reads', () => {
    const required = new Set<string>();
    const walk = (node: unknown): void => {
      if (Array.isArray(node)) for (const each of node) walk(each);
      else if (node !== null && typeof node === 'object') {
        const ref = (node as { secretKeyRef?: { name: string; key: string; optional?: boolean } }).secretKeyRef;
        if (ref !== undefined && ref.optional !== true) required.add(`${ref.name}/${ref.key}`);
        const volume = (node as { secret?: { secretName: string; items?: { key: string }[]; optional?: boolean } })
          .secret;
        if (volume?.secretName !== undefined && volume.optional !== true) {
          for (const item of volume.items ?? []) required.add(`${volume.secretName}/${item.key}`);
        }
        for (const value of Object.values(node)) walk(value);
      }
    };
    const proxy = parseAllDocuments(readFileSync(join(root, 'deploy/kubernetes/proxy/disagg.yaml'), 'utf8'));
    walk(proxy.map((document) => document.toJSON()));
    expect([...required].sort()).toEqual(['disagg-keys/api-key', 'disagg-keys/tenants.yaml']);
    const given = new Set(
      secrets.flatMap((secret) => Object.keys(secret.stringData).map((key) => `${secret.metadata.name}/${key}`)),
    );
    for (const key of required) expect(given.has(key), key).toBe(true);
    const keys = secrets.find((secret) => secret.metadata.name === 'disagg-keys');
    const tenants = parseTenants(keys.stringData['tenants.yaml'], 'tenants.yaml');
    expect(tenants.tenants.length).toBeGreaterThan(0);
    expect(parse(keys.stringData['tenants.yaml']).tenants[0].keys[0]).toContain('REPLACE-ME');
  });
});
