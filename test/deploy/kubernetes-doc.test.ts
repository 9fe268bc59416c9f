// docs/kubernetes.md: every fenced block has a language, every Kustomize folder it applies
// renders, and the blocks that build the reader's own overlay (my-fleet) are run as written,
// beside a `deploy` folder that is this checkout's.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { parseAllDocuments } from 'yaml';
import { run, tool } from '../support/tools.js';

const root = fileURLToPath(new URL('../..', import.meta.url));
const kubectl = tool('kubectl', 'kubernetes-client');
const doc = readFileSync(join(root, 'docs/kubernetes.md'), 'utf8');
const blocks = [...doc.matchAll(/^```(\w*)\n([\s\S]*?)^```$/gm)].map((match) => ({
  language: match[1] as string,
  text: match[2] as string,
}));
const shell = blocks.filter((block) => block.language === 'sh').map((block) => block.text);
// docs/tokenizer.md patches the same reader's overlay (an init container that fetches the tokenizer).
const tokenizerShell = [
  ...readFileSync(join(root, 'docs/tokenizer.md'), 'utf8').matchAll(/^```sh\n([\s\S]*?)^```$/gm),
].map((match) => match[1] as string);
// biome-ignore lint/suspicious/noExplicitAny: rendered YAML, whose fields the tests check by name
type Manifest = any;

describe('docs/kubernetes.md', () => {
  it('every fenced block names its language', () => {
    expect(blocks.length).toBeGreaterThan(0);
    for (const block of blocks) expect(['sh', 'yaml', 'json', 'text', 'ts', 'promql']).toContain(block.language);
  });

  it.skipIf(kubectl.skip)(`every folder it applies or renders exists and renders (${kubectl.why})`, () => {
    const paths = shell.flatMap((text) =>
      [...text.matchAll(/kubectl (?:apply -k|kustomize) (\S+)/g)].map((match) => match[1] as string),
    );
    expect(paths).toContain('deploy/kubernetes/overlays/vllm');
    expect(paths).toContain('deploy/kubernetes/overlays/sglang');
    for (const path of new Set(paths.filter((each) => each.startsWith('deploy/')))) {
      expect(() => run('kubectl', ['kustomize', join(root, path)]), path).not.toThrow();
    }
  });

  it.skipIf(kubectl.skip)(
    `its own overlay, built as the page says, runs the image loaded into the cluster and the model chosen (${kubectl.why})`,
    () => {
      const dir = mkdtempSync(join(tmpdir(), 'disagg-doc-'));
      symlinkSync(join(root, 'deploy'), join(dir, 'deploy'));
      // The blocks that write or render my-fleet and touch no cluster, in the page's order.
      const local = shell.filter((text) => text.includes('my-fleet') && !/kubectl (apply|create|-n)/.test(text));
      expect(local.length).toBeGreaterThanOrEqual(2);
      for (const text of local) {
        const result = spawnSync('sh', ['-e', '-c', text], { cwd: dir, encoding: 'utf8' });
        expect(result.status, `${text}\n${result.stderr}`).toBe(0);
        expect(result.stdout.trim()).not.toBe('');
      }
      expect(shell.some((text) => text.includes('kubectl apply -k my-fleet'))).toBe(true);
      const rendered: Manifest[] = parseAllDocuments(run('kubectl', ['kustomize', join(dir, 'my-fleet')])).map((d) =>
        d.toJSON(),
      );
      const proxy = rendered.find((m) => m.kind === 'Deployment' && m.metadata.name === 'disagg');
      expect(proxy.spec.template.spec.containers[0].image).toBe('disagg:dev');
      const models = rendered.filter((m) => m.kind === 'ConfigMap' && m.metadata.name.startsWith('vllm-model-'));
      expect(models.map((m) => m.data.MODEL)).toEqual(['Qwen/Qwen3-4B']);
      const prefill = rendered.find((m) => m.kind === 'Deployment' && m.metadata.name === 'prefill-workers');
      expect(prefill.spec.template.spec.containers[0].env[0].valueFrom.configMapKeyRef.name).toBe(
        models[0].metadata.name,
      );

      // docs/tokenizer.md's init container, patched in as the page says: the same image, the
      // workers' model, the proxy's cache volume, and the proxy then offline.
      const patches = tokenizerShell.filter((text) => text.includes('my-fleet'));
      expect(patches.length).toBeGreaterThanOrEqual(1);
      for (const text of patches) {
        const result = spawnSync('sh', ['-e', '-c', text], { cwd: dir, encoding: 'utf8' });
        expect(result.status, `${text}\n${result.stderr}`).toBe(0);
        expect(result.stdout).toContain('fetch-tokenizer');
      }
      const patched: Manifest[] = parseAllDocuments(run('kubectl', ['kustomize', join(dir, 'my-fleet')])).map((d) =>
        d.toJSON(),
      );
      const pod = patched.find((m) => m.kind === 'Deployment' && m.metadata.name === 'disagg').spec.template.spec;
      const [init] = pod.initContainers;
      expect(init.image).toBe('disagg:dev');
      expect(init.args).toEqual(['tokenizer', 'fetch', '$(DISAGG_TOKENIZER)']);
      expect(init.env.find((e: Manifest) => e.name === 'DISAGG_TOKENIZER').valueFrom.configMapKeyRef.name).toBe(
        models[0].metadata.name,
      );
      const proxyEnv = pod.containers[0].env;
      const home = proxyEnv.find((e: Manifest) => e.name === 'HF_HOME').value;
      expect(init.env.find((e: Manifest) => e.name === 'HF_HOME').value).toBe(home);
      expect(proxyEnv.find((e: Manifest) => e.name === 'HF_HUB_OFFLINE').value).toBe('1');
      expect(init.volumeMounts).toEqual([{ name: 'hf-cache', mountPath: home }]);
      expect(pod.volumes.map((v: Manifest) => v.name)).toContain('hf-cache');
    },
  );

  it('names the Secrets and keys the manifests read', () => {
    const secrets = shell.join('\n');
    expect(secrets).toMatch(
      /create secret generic disagg-keys[\s\S]*--from-literal=api-key=[\s\S]*--from-file=tenants\.yaml/,
    );
    expect(secrets).toContain('create secret generic hf-token --from-literal=token=');
  });
});
