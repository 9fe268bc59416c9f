import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { parseAllDocuments } from 'yaml';
import { loadServeConfig } from '../src/server/config.js';
import type { ServeConfig } from '../src/server/options.js';
import { SETTINGS } from '../src/server/options.js';

const root = fileURLToPath(new URL('..', import.meta.url));
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
const manifests = parseAllDocuments(readFileSync(join(root, 'deploy/kubernetes/disagg.yaml'), 'utf8')).map(
  (document) => document.toJSON() as Manifest,
);
const of = (kind: string) => manifests.find((manifest) => manifest.kind === kind) as Manifest;

describe('the Kubernetes manifests agree with the proxy', () => {
  const deployment = of('Deployment');
  const pod = deployment.spec.template.spec;
  const container = pod.containers[0];
  const configMap = of('ConfigMap');
  // The configuration the pod mounts, as disagg serve reads it.
  const dir = mkdtempSync(join(tmpdir(), 'disagg-deploy-'));
  const mount = container.volumeMounts.find((volume: { name: string }) => volume.name === 'config');
  const [fileName, text] = Object.entries(configMap.data ?? {})[0] as [string, string];
  writeFileSync(join(dir, fileName), text);
  const config = loadServeConfig(['--config', join(dir, fileName)], {}) as ServeConfig;

  it('the container runs the config file it mounts, on the port it exposes', () => {
    const configArg = container.args[container.args.indexOf('--config') + 1];
    expect(configArg).toBe(`${mount.mountPath}/${fileName}`);
    expect(container.ports[0].containerPort).toBe(config.port);
    const service = of('Service');
    expect(service.spec.ports[0].targetPort).toBe(container.ports[0].name);
    expect(service.spec.selector).toEqual(deployment.spec.selector.matchLabels);
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
    expect(final).toMatch(/^ENTRYPOINT \["node", "dist\/cli\.js"\]$/m);
    expect(final).not.toMatch(/npx|npm (start|run)/);
    expect(final).toMatch(/^USER node$/m);
    expect(final).toMatch(new RegExp(`^EXPOSE ${defaultOf('port')}$`, 'm'));
  });

  it('builds in a stage of its own and ships only the production dependencies and the build', () => {
    expect(dockerfile.match(/^FROM /gm)).toHaveLength(2);
    expect(dockerfile).toMatch(/npm prune --omit=dev/);
    expect(final).not.toMatch(/COPY src|COPY \. /);
  });
});
