// Rules about the source text itself. They read src/ as written, so they live outside the
// folders that `npm run mutation` runs: Stryker's instrumented copy would not match them.
import { readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { cyclesOf, importsOf } from './support/import-graph.js';

describe('no leaks', () => {
  it('no abort listeners anywhere, and one timer call on the request path: the deadline timer, cleared, and unref-ed unless it is a backoff', () => {
    const dir = fileURLToPath(new URL('../src', import.meta.url));
    // The library a router embeds. Left out: the fake workers (src/testing, test tooling that
    // paces tokens), the proxy server (src/server: health probes, a client's drain limit, the
    // shutdown grace), discovery (src/discovery: the re-resolve interval, the backoff of a
    // failed watch), the replicas' sharing (src/replicas: its sync round) and a KV view's
    // silence clock (kv/kv-silence.ts: one per worker, never per request) and a simulated
    // engine's real-time clock (simulation/realtime-clock.ts: one per live simulated worker) and
    // a replay's turn of the event loop (simulation/replay.ts: while a routing waits on a
    // promise its last step settled; never on a request's path), which own their timers and
    // clear them (checked below).
    const files = readdirSync(dir, { recursive: true }).filter((f) => {
      const path = String(f).replaceAll('\\', '/');
      return (
        path.endsWith('.ts') &&
        !path.startsWith('testing/') &&
        !path.startsWith('server/') &&
        !path.startsWith('cli/') &&
        !path.startsWith('discovery/') &&
        !path.startsWith('replicas/') &&
        path !== 'kv/kv-silence.ts' &&
        path !== 'simulation/realtime-clock.ts' &&
        path !== 'simulation/replay.ts'
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
      'simulation/realtime-clock.ts',
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
    .filter((file) => file.endsWith('.ts'))
    .sort();
  const texts = new Map(files.map((file) => [file, readFileSync(`${src}${file}`, 'utf8')]));
  const imports = new Map([...texts].map(([file, text]) => [file, importsOf(file, text)]));
  /**
   * Folders whose folders inside are rooms of their own for the loop rule: nothing in
   * `server/settings`, `server/pipeline`, `server/fleet` or `server/observability` imports from
   * the hosts around them, nor any two of them from each other both ways.
   */
  const SPLIT = ['server'];
  /** The room of a path under src/: its top-level folder (a file at the top is its own), or a folder inside one of SPLIT. */
  const roomOf = (file: string) => {
    const [top, inside, ...rest] = file.split('/') as [string, string?, ...string[]];
    return SPLIT.includes(top) && inside !== undefined && rest.length > 0 ? `${top}/${inside}` : top;
  };

  it('no import loop between the folders of src/ (each folder inside server/ one of its own): each layer imports only those below it', () => {
    const edges = new Map<string, Set<string>>();
    // Every import counts here, types and import() too: a folder that names another's types
    // depends on it as much as one that calls it.
    for (const [file, each] of imports) {
      for (const { to } of each) {
        const [from, target] = [roomOf(file), roomOf(to)];
        if (from !== target) edges.set(from, (edges.get(from) ?? new Set()).add(target));
      }
    }
    // The hosts are a room apart from the folders inside server/ (which the rule would miss otherwise).
    expect([...(edges.get('server') ?? [])]).toEqual(expect.arrayContaining(['server/settings', 'server/pipeline']));
    expect(cyclesOf(edges)).toEqual([]);
  });

  /** The graph of value imports (those that load the module as the importer loads) between files. */
  function valueGraph(modules: ReadonlyMap<string, string>): Map<string, Set<string>> {
    const edges = new Map<string, Set<string>>();
    for (const [file, text] of modules) {
      for (const { to, kind } of importsOf(file, text)) {
        if (kind === 'value') edges.set(file, (edges.get(file) ?? new Set()).add(to));
      }
    }
    return edges;
  }

  it('no value cycle between the files of src/: a module never needs one that needs it as they load (types and import() left out)', () => {
    expect(valueGraph(texts).size).toBeGreaterThan(100);
    expect(cyclesOf(valueGraph(texts))).toEqual([]);
  });

  it('the value-cycle rule finds a cycle of value imports however long, and none through a type-only or lazy one', () => {
    const modules = (last: string) =>
      new Map([
        ['a/rows.ts', "import { WORKERS } from './workers.js';\nexport const ROWS = [...WORKERS];"],
        ['a/workers.ts', "export * from './pools.js';\nexport const WORKERS = [];"],
        ['a/pools.ts', `${last}\nexport const POOLS = [];`],
      ]);
    expect(cyclesOf(valueGraph(modules("import { ROWS } from './rows.js';")))).toEqual([
      'a/pools.ts -> a/rows.ts -> a/workers.ts -> a/pools.ts',
    ]);
    expect(cyclesOf(valueGraph(modules("import './rows.js';")))).toHaveLength(1);
    expect(cyclesOf(valueGraph(modules("import { type ROWS } from './rows.js';")))).toEqual([]);
    expect(cyclesOf(valueGraph(modules("import type { ROWS } from './rows.js';")))).toEqual([]);
    expect(cyclesOf(valueGraph(modules("export type { ROWS } from './rows.js';")))).toEqual([]);
    expect(cyclesOf(valueGraph(modules("const rows = () => import('./rows.js');")))).toEqual([]);
  });

  it('no file of src/ over 500 lines', () => {
    const long = files.filter((file) => (texts.get(file) as string).split('\n').length > 501);
    expect(long).toEqual([]);
  });

  /** The folders of src/ (`''` its top) with more than 30 source files directly inside, in sort order. */
  const crowded = (paths: readonly string[]) => {
    const count = new Map<string, number>();
    for (const path of paths) {
      const folder = path.includes('/') ? path.slice(0, path.lastIndexOf('/')) : '';
      count.set(folder, (count.get(folder) ?? 0) + 1);
    }
    return [...count]
      .filter(([, files]) => files > 30)
      .map(([folder]) => folder)
      .sort();
  };

  it('no folder of src/ has more than 30 source files directly inside it', () => {
    expect(crowded(files)).toEqual([]);
    const many = (folder: string, n: number) => Array.from({ length: n }, (_, i) => `${folder}/m${i}.ts`);
    expect(crowded([...files, ...many('kv/tiers', 31)])).toEqual(['kv/tiers']);
    expect(crowded([...many('flow', 30), 'flow/deeper/one.ts'])).toEqual([]);
  });
});
