// Rules about the source text itself. They read src/ as written, so they live outside the
// folders that `npm run mutation` runs: Stryker's instrumented copy would not match them.
import { readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

describe('no leaks', () => {
  it('no abort listeners anywhere, and one timer call on the request path: the deadline timer, cleared, and unref-ed unless it is a backoff', () => {
    const dir = fileURLToPath(new URL('../src', import.meta.url));
    // The library a router embeds. Left out: the fake workers (src/testing, test tooling that
    // paces tokens), the proxy server (src/server: health probes, a client's drain limit, the
    // shutdown grace), discovery (src/discovery: the re-resolve interval, the backoff of a
    // failed watch), the replicas' sharing (src/replicas: its sync round) and a KV view's
    // silence clock (kv/kv-silence.ts: one per worker, never per request), which own their
    // timers and clear them (checked below).
    const files = readdirSync(dir, { recursive: true }).filter((f) => {
      const path = String(f).replaceAll('\\', '/');
      return (
        path.endsWith('.ts') &&
        !path.startsWith('testing/') &&
        !path.startsWith('server/') &&
        !path.startsWith('cli/') &&
        !path.startsWith('discovery/') &&
        !path.startsWith('replicas/') &&
        path !== 'kv/kv-silence.ts'
      );
    });
    expect(files.length).toBeGreaterThan(5);
    const timers: string[] = [];
    for (const file of files) {
      const text = readFileSync(`${dir}/${file}`, 'utf8');
      if (/\bset(Timeout|Interval|Immediate)\s*\(/.test(text)) timers.push(String(file).replaceAll('\\', '/'));
      expect(text, String(file)).not.toMatch(/addEventListener\s*\(/);
    }
    expect(timers).toEqual(['flow/deadlines.ts']);
    const deadlines = readFileSync(`${dir}/flow/deadlines.ts`, 'utf8');
    expect(deadlines.match(/\bset(Timeout|Interval|Immediate)\s*\(/g)).toEqual(['setTimeout(']);
    expect(deadlines).toMatch(/if \(!keepsAlive\) timer\.unref\?\.\(\);\s+return \(\) => clearTimeout\(timer\);/);
    // Discovery's and the replicas' timers never keep a process alive, and stop() or close() clears them.
    for (const file of [
      'discovery/dns-discovery.ts',
      'discovery/kubernetes-discovery.ts',
      'discovery/inference-pool-discovery.ts',
      'replicas/shared-in-flight.ts',
      'kv/kv-silence.ts',
    ]) {
      const text = readFileSync(`${dir}/${file}`, 'utf8');
      const set = text.match(/this\.#(\w+) = set(Timeout|Interval)\(/g) ?? [];
      expect(set.length, file).toBeGreaterThan(0);
      for (const call of set) {
        const field = /#(\w+)/.exec(call)?.[1] as string;
        expect(text, file).toContain(`this.#${field}.unref();`);
        expect(text, file).toMatch(new RegExp(`clear(Timeout|Interval)\\(this\\.#${field}\\)`));
      }
    }
  });
});

describe('layout', () => {
  const src = fileURLToPath(new URL('../src/', import.meta.url));
  const files = readdirSync(src, { recursive: true })
    .map((file) => String(file).replaceAll('\\', '/'))
    .filter((file) => file.endsWith('.ts'));
  /** The top-level folder of a path under src/ (a file at the top is its own). */
  const folderOf = (file: string) => file.split('/')[0] as string;

  it('no import loop between the folders of src/: each layer imports only those below it', () => {
    const edges = new Map<string, Set<string>>();
    for (const file of files) {
      for (const [, target] of readFileSync(`${src}${file}`, 'utf8').matchAll(/from '(\.{1,2}\/[^']+)'/g)) {
        const resolved = new URL(target as string, `file:///${file}`).pathname.slice(1);
        const [from, to] = [folderOf(file), folderOf(resolved)];
        if (from !== to) edges.set(from, (edges.get(from) ?? new Set()).add(to));
      }
    }
    // Each folder that can reach itself again, with the way it does.
    const loops: string[] = [];
    for (const start of edges.keys()) {
      const seen = new Set<string>();
      const stack: string[][] = [[start]];
      while (stack.length > 0) {
        const path = stack.pop() as string[];
        for (const next of edges.get(path.at(-1) as string) ?? []) {
          if (next === start) loops.push([...path, next].join(' -> '));
          else if (!seen.has(next)) {
            seen.add(next);
            stack.push([...path, next]);
          }
        }
      }
    }
    expect(loops).toEqual([]);
  });

  it('no file of src/ over 500 lines but the decode guard', () => {
    const long = files.filter(
      (file) => file !== 'handoff/decode-guard.ts' && readFileSync(`${src}${file}`, 'utf8').split('\n').length > 501,
    );
    expect(long).toEqual([]);
  });
});
