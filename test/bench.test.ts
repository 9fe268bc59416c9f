import { spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { existsSync } from 'node:fs';
import { createServer } from 'node:http';
import { type AddressInfo, connect } from 'node:net';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { startFakeWorker } from '../src/testing/index.js';
import { postgresTool } from './support/postgres.js';
import { tool } from './support/tools.js';

const root = fileURLToPath(new URL('..', import.meta.url));

describe('npm run bench (smoke run, small N)', () => {
  it('runs every case and prints the ratio table and the targets, without timing assertions', () => {
    const run = spawnSync(
      process.execPath,
      ['bench/run.mjs', '--items=3000', '--rounds=1', '--passes=1', '--streams=50', '--tokens=10', '--no-write'],
      { cwd: root, encoding: 'utf8' },
    );
    expect(run.status, run.stderr).toBe(0);
    const out = run.stdout;
    expect(out).toMatch(/^Node v\d+\.\d+\.\d+, \d+ CPUs/);
    for (const label of [
      'bare for-await over the source (baseline)',
      'plain pass-through async generator',
      'forwardDecode, prefill pending (racing)',
      'forwardDecode, prefill succeeded (forward-only)',
      'minimal hand-written iterator',
      'per-item Promise.race, prefill pending',
      'rxjs from/takeUntil, prefill pending',
      'through forwardDecode',
    ]) {
      expect(out).toContain(`| ${label}`);
    }
    expect(out).toContain('| target | value | wanted | met |');
    expect(out).toMatch(/\| SGLang \/generate: 1M token ids and a 64-bit room \| \d+ \| \d+\.\d+ \| \d+\.\d+ \|/);
    // Every figure is a number: no NaN or Infinity from a case that failed to run.
    expect(out).not.toMatch(/NaN|Infinity/);
  }, 60_000);
});

describe('npm run bench:proxy (smoke run, small N)', () => {
  /** bench/proxy.mjs with small N (8 tokens at 1 ms) and `options`; it exits 0. */
  const benchProxy = (options: string[]) => {
    const run = spawnSync(process.execPath, ['bench/proxy.mjs', '--tokens=8', '--interval=1', ...options], {
      cwd: root,
      encoding: 'utf8',
      timeout: 120_000,
    });
    expect(run.status, run.stderr).toBe(0);
    return run;
  };

  it('runs every path through real processes and prints the table and the ratios', () => {
    const run = benchProxy(['--requests=40', '--concurrency=4', '--passes=1', '--warmup=20']);
    for (const label of [
      'client -> decode worker (no prefill)',
      'client -> disagg proxy -> prefill, then decode',
      'client -> disagg serve (its own writer on node:http)',
      'client -> node:http -> createHandler (Request/Response) -> workers',
      'client -> bare node:http SSE relay -> unpaced decode',
      'client -> fastify SSE relay -> unpaced decode',
    ]) {
      expect(run.stdout).toContain(`| ${label} |`);
    }
    expect(run.stdout).toMatch(
      /proxy \/ direct: TTFT \d+\.\d+ x, per token \d+\.\d+ x, inter-token p99 \d+\.\d+ x, requests\/s \d+\.\d+ x/,
    );
    // The proxy's own CPU time per request, read from /proc, its peak resident set (sampled
    // during the run) and its event loop's delay p99 (from its /metrics).
    expect(run.stdout).toMatch(
      /\| client -> disagg proxy -> prefill, then decode \|( [\d.]+ \|){3} [\d.]+ \/ [\d.]+ \| \d+\.\d+ \| \d+\.\d \| \d+\.\d\d \|/,
    );
    expect(run.stdout).toMatch(/fastify \/ node:http relay: requests\/s \d+\.\d+ x/);
    expect(run.stdout).toMatch(/handler \/ serve: proxy CPU per request \d+\.\d+ x/);
    expect(run.stdout).not.toMatch(/NaN|Infinity/);
  }, 130_000);

  it("--only flags,knee: disagg under other node flags beside the image's, and the knee of rising loads", () => {
    const run = benchProxy([
      '--only=flags,knee',
      '--flag-sets=none;--max-semi-space-size=8',
      '--knee=2,4',
      '--requests=30',
      '--passes=2',
      '--warmup=10',
      '--prompt-kb=4',
    ]);
    // Where the processes ran: pinned with taskset where there is more than one CPU.
    expect(run.stdout).toMatch(/Every proxy pinned to CPU 0 alone|Nothing pinned/);
    expect(run.stdout).toContain("| disagg, Node's defaults |");
    expect(run.stdout).toContain('| disagg, --max-semi-space-size=8 |');
    // Each ratio with its spread over the passes (peak RSS: a figure no small run leaves at 0;
    // a gap's median can be, and its ratio is then printed as '-').
    expect(run.stdout).toMatch(
      /\| peak RSS \| \d+\.\d\d x \(\d+\.\d\d-\d+\.\d\d\) \| \d+\.\d\d x \(\d+\.\d\d-\d+\.\d\d\) \|$/m,
    );
    expect(run.stdout).toMatch(/^\| inter-token gap p99 \|( (-|\d+\.\d\d x \(\d+\.\d\d-\d+\.\d\d\)) \|){2}$/m);
    expect(run.stdout).toMatch(/^\| 4 \| \d+, \d+, \d+\.\d\d, \d+\.\d\d \| \d+, \d+, \d+\.\d\d, \d+\.\d\d \|$/m);
    expect(run.stdout).toMatch(/disagg serve: (the knee at|no knee up to)/);
    expect(run.stdout).not.toMatch(/NaN|Infinity/);
  }, 130_000);
});

describe('npm run bench:agents (smoke run, small N)', () => {
  it("prints each agents' API beside chat through one pinned proxy, with ratios and their spreads", () => {
    const run = spawnSync(
      process.execPath,
      [
        'bench/agent-apis.mjs',
        '--tokens=8',
        '--interval=1',
        '--requests=30',
        '--warmup=10',
        '--concurrency=4',
        '--passes=2',
        // Its chained part, run by default too, at its least (its own cases below).
        '--stores=memory',
        '--sessions=2',
        '--chain-warmup=1',
        '--turns=2',
      ],
      { cwd: root, encoding: 'utf8', timeout: 120_000 },
    );
    expect(run.status, run.stderr).toBe(0);
    expect(run.stdout).toMatch(/^\| memory \| all 2 \|/m);
    for (const name of ['chat', 'responses', 'messages']) {
      expect(run.stdout).toMatch(new RegExp(`^\\| ${name} \\| \\d+\\.\\d{3} \\| \\d+\\.\\d{3} \\|`, 'm'));
    }
    expect(run.stdout).toMatch(
      /^\| proxy CPU per request \| \d+\.\d\d x \(\d+\.\d\d-\d+\.\d\d\) \| \d+\.\d\d x \(\d+\.\d\d-\d+\.\d\d\) \|$/m,
    );
  }, 130_000);
});

describe('npm run bench:agents, its chained turns (smoke run, small N)', () => {
  /** bench/agent-apis.mjs's chained part alone, with tiny sessions and `options`. */
  const benchChains = (options: string[]) =>
    spawnSync(
      process.execPath,
      [
        'bench/agent-apis.mjs',
        '--only=chains',
        '--tokens=8',
        '--interval=1',
        '--sessions=3',
        '--chain-warmup=1',
        '--turns=3',
        '--chain-concurrency=2',
        '--passes=2',
        ...options,
      ],
      { cwd: root, encoding: 'utf8', timeout: 120_000 },
    );
  const stores = () => ({
    redis: tool('redis-server', 'redis-server').present,
    postgres: postgresTool().present,
  });

  it('prints, for every store installed, each turn of stateless, history and chained sessions and what chaining adds, and names a store it skipped', () => {
    const run = benchChains([]);
    expect(run.status, run.stderr).toBe(0);
    const present = stores();
    const figure = '-?\\d+\\.\\d\\d';
    const row = (store: string, label: string) =>
      new RegExp(
        `^\\| ${store} \\| ${label} \\|( ${figure} / ${figure} \\|){3}( ${figure} \\(${figure} to ${figure}\\) \\|){4}$`,
        'm',
      );
    for (const store of ['memory', 'redis', 'postgres'] as const) {
      if (store !== 'memory' && !present[store]) {
        expect(run.stdout).toMatch(new RegExp(`^skipped ${store}: .+ is not installed`, 'm'));
        continue;
      }
      for (const label of ['1 \\(0\\)', '2 \\(1\\)', '3 \\(2\\)', 'all 3'])
        expect(run.stdout).toMatch(row(store, label));
      expect(run.stdout).toMatch(
        new RegExp(`^\\| ${store} \\| \\d+\\.\\d{3} \\| \\d+\\.\\d{3} \\| \\d+\\.\\d{3} \\|$`, 'm'),
      );
    }
    // What turn 3 of a session weighs, as its client sends it whole.
    expect(run.stdout).toMatch(/turn 3's input \d+\.\d KB as a history session sends it/);
    expect(run.stdout).not.toMatch(/NaN|Infinity/);
  }, 130_000);

  const servers = (['redis', 'postgres'] as const).filter((store) => stores()[store]);
  it.skipIf(servers.length === 0)(
    'stops the Redis and PostgreSQL servers it started when a proxy fails to start',
    async () => {
      const wanted = servers;
      // /bin/false as the proxy's node: the servers are up, the first proxy exits at once.
      const run = benchChains([`--stores=${wanted.join(',')}`, '--node=/bin/false']);
      expect(run.status).not.toBe(0);
      expect(run.stderr).toMatch(/exited with 1/);
      const started = [...run.stderr.matchAll(/^bench:agents: (\w+) on 127\.0\.0\.1:(\d+)(?:, its data in (\S+))?$/gm)];
      expect(started.map((match) => match[1])).toEqual(wanted);
      for (const [, , port, dir] of started) {
        const refused = await new Promise<boolean>((resolve) => {
          const socket = connect(Number(port), '127.0.0.1');
          socket.once('connect', () => {
            socket.destroy();
            resolve(false);
          });
          socket.once('error', () => resolve(true));
        });
        expect(refused, `a server still listens on ${port}`).toBe(true);
        if (dir !== undefined) expect(existsSync(dir)).toBe(false);
      }
    },
    130_000,
  );
});

describe('npm run bench:epp (smoke run, small N)', () => {
  it('prints the picker beside the proxy for the same request, pinned, with the ratio and its spread', () => {
    const run = spawnSync(
      process.execPath,
      ['bench/epp.mjs', '--tokens=8', '--requests=30', '--warmup=10', '--concurrency=4', '--passes=2'],
      { cwd: root, encoding: 'utf8', timeout: 120_000 },
    );
    expect(run.status, run.stderr).toBe(0);
    expect(run.stdout).toMatch(/^\| disagg serve \(the whole relay\) \| \d+\.\d{3} \|/m);
    expect(run.stdout).toMatch(
      /^\| disagg epp \(the decision and the echo\) \| \d+\.\d{3} \| \d+\.\d\d \/ \d+\.\d\d \| \d+ \|$/m,
    );
    expect(run.stdout).toMatch(/^picker CPU per request \/ proxy's: \d+\.\d\d x \(\d+\.\d\d-\d+\.\d\d\)$/m);
  }, 130_000);
});

describe('bench/worker-client.mjs (smoke run, small N)', () => {
  it('runs both worker clients in their own processes and prints the table and the ratio', () => {
    const run = spawnSync(
      process.execPath,
      [
        'bench/worker-client.mjs',
        '--requests=20',
        '--concurrency=2',
        '--tokens=4',
        '--interval=1',
        '--warmup=10',
        '--rounds=2',
      ],
      { cwd: root, encoding: 'utf8', timeout: 60_000 },
    );
    expect(run.status, run.stderr).toBe(0);
    expect(run.stdout).toMatch(/\| undici's Agent, dispatch handler \(the library's\) \| \d+\.\d{3} \| \d+\.\d \|/);
    expect(run.stdout).toMatch(/\| node:http's Agent and request \| \d+\.\d{3} \| \d+\.\d \|/);
    expect(run.stdout).toMatch(/node:http \/ undici: CPU per request \d+\.\d\d x, peak RSS \d+\.\d\d x/);
    expect(run.stdout).not.toMatch(/NaN|Infinity/);
  }, 70_000);
});

describe('npm run bench:routing (smoke run, small N)', () => {
  it('runs every policy on every workload through disagg serve and prints the table, the oracle and the decision cost', () => {
    const run = spawnSync(
      process.execPath,
      ['bench/routing.mjs', '--quick', '--ms-per-token=0.01', '--concurrency=4'],
      {
        cwd: root,
        encoding: 'utf8',
        timeout: 120_000,
      },
    );
    expect(run.status, run.stderr).toBe(0);
    for (const workload of ['multi-turn', 'shared-prefix', 'cold']) expect(run.stdout).toContain(`${workload}: `);
    for (const policy of ['least-in-flight', 'round-robin', 'power-of-two', 'session', 'cache-aware']) {
      // hit, of oracle, TTFT p50 and p99, imbalance, CPU per request, failures (none).
      expect(run.stdout).toMatch(
        new RegExp(`^ {2}${policy} +\\| +[\\d.]+% \\| +(\\d+%|-) \\|( +[\\d.]+ +\\|){4} 0$`, 'm'),
      );
    }
    expect(run.stdout).toMatch(/ oracle +\| +[\d.]+% \|/);
    expect(run.stdout).toMatch(/cache-aware against least-in-flight, TTFT p50: multi-turn \d+\.\d+ x/);
    expect(run.stdout).toMatch(/ {2}cache-aware +\| +[\d.]+ \| +[\d.]+ \| +[\d.]+\n/);
    expect(run.stdout).not.toMatch(/NaN|Infinity/);
  }, 130_000);
});

describe('npm run bench:routing, its fleet part (smoke run, small N)', () => {
  it('runs 1, 2 and 4 replicas of each policy (alone and sharing through Redis) over workers that publish KV events, then the decision with tokenization', () => {
    const run = spawnSync(
      process.execPath,
      ['bench/routing-fleet.mjs', '--quick', '--ms-per-token=0.01', '--concurrency=4'],
      { cwd: root, encoding: 'utf8', timeout: 240_000 },
    );
    expect(run.status, run.stderr).toBe(0);
    const shared = tool('redis-server', 'redis-server').present;
    for (const replicas of [1, 2, 4]) {
      for (const policy of ['least-in-flight', 'cache-aware', 'precise-prefix', 'session']) {
        for (const how of replicas === 1 || !shared ? ['no    '] : ['no    ', 'redis ']) {
          expect(run.stdout).toMatch(
            new RegExp(
              `^ +${replicas} \\| ${how} \\| ${policy} +\\| +[\\d.]+% \\| +\\d+% \\|( +[\\d.]+ +\\|){3} +\\d+% \\| +[\\d.]+ \\| 0$`,
              'm',
            ),
          );
        }
      }
    }
    if (shared) {
      expect(run.stdout).toMatch(
        /^4 replicas sharing through Redis against 1 replica: least-in-flight imbalance \d+\.\d\d x \(alone \d+\.\d\d x\), session stickiness \d+\.\d\d x \(alone \d+\.\d\d x\)$/m,
      );
    }
    expect(run.stdout).toMatch(/precise-prefix against cache-aware, TTFT p50: 1 replica \d+\.\d+ x/);
    expect(run.stdout).toMatch(/a next turn \(history cached, 1 KB new\): [\d.]+ \/ [\d.]+ \/ [\d.]+/);
    expect(run.stdout).toMatch(/event loop delay p99 while eight 128 KB prompts are tokenized: [\d.]+ ms/);
    expect(run.stdout).not.toMatch(/NaN|Infinity/);
  }, 250_000);
});

describe("bench/node-floor.mjs (Node's floor beside the peers)", () => {
  /** Starts the floor for `protocol` in front of a fresh pair of fake workers and streams one request through it. */
  async function throughFloor(protocol: 'sglang' | 'vllm') {
    const prefill = await startFakeWorker({ role: 'prefill', protocol });
    const decode = await startFakeWorker({ role: 'decode', protocol, tokens: 5 });
    const floor = spawn(
      process.execPath,
      ['bench/node-floor.mjs', protocol, prefill.url, decode.url, String(prefill.bootstrapPort)],
      { cwd: root, stdio: ['pipe', 'pipe', 'inherit'] },
    );
    try {
      const [line] = (await once(createInterface({ input: floor.stdout }), 'line')) as [string];
      const { url } = JSON.parse(line) as { url: string };
      const answer = await fetch(`${url}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'm', prompt: 'hello', max_tokens: 5, stream: true }),
      });
      return { prefill, decode, status: answer.status, text: await answer.text() };
    } finally {
      floor.stdin?.end();
      await once(floor, 'exit');
      await Promise.all([prefill.close(), decode.close()]);
    }
  }

  it("does mini_lb's job: one body with a bootstrap room to both workers at once, the decode worker's stream back", async () => {
    const { prefill, decode, status, text } = await throughFloor('sglang');
    expect(status).toBe(200);
    expect(text.match(/^data: \{/gm)?.length).toBeGreaterThanOrEqual(5);
    expect(text.trimEnd().endsWith('data: [DONE]')).toBe(true);
    // The decode worker took the KV that the prefill worker committed under the same room.
    expect(decode.requests[0]?.kv).toBe('taken');
    expect(prefill.requests[0]?.body.bootstrap_room).toBe(decode.requests[0]?.body.bootstrap_room);
  }, 30_000);

  it("does the toy proxy's job: prefill for one token, then decode with the KV parameters prefill answered", async () => {
    const { prefill, decode, status, text } = await throughFloor('vllm');
    expect(status).toBe(200);
    expect(text.match(/^data: \{/gm)?.length).toBeGreaterThanOrEqual(5);
    expect(text.trimEnd().endsWith('data: [DONE]')).toBe(true);
    expect(prefill.requests[0]?.body).toMatchObject({ max_tokens: 1, stream: false });
    expect(decode.requests[0]?.kv).toBe('taken');
  }, 30_000);
});

describe("bench:proxy's load: a rate held to a number in flight", () => {
  /**
   * A worker that answers each stream 20 ms after it came, counting the streams it holds at
   * once; every `failEvery`-th request it answers 500.
   */
  async function countingWorker(failEvery = 0) {
    let now = 0;
    let count = 0;
    const seen = { most: 0, served: 0 };
    const server = createServer((req, res) => {
      now++;
      count++;
      seen.most = Math.max(seen.most, now);
      req.resume();
      const fails = failEvery > 0 && count % failEvery === 0;
      setTimeout(() => {
        if (fails) {
          res.writeHead(500, { 'content-type': 'application/json' });
          res.end('{"error":{"message":"the engine\nfailed"}}');
        } else {
          res.writeHead(200, { 'content-type': 'text/event-stream' });
          res.end('data: {"n":1}\n\ndata: {"n":2}\n\ndata: [DONE]\n\n');
        }
        now--;
        seen.served++;
      }, 20);
    });
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    const { port } = server.address() as AddressInfo;
    return { url: `http://127.0.0.1:${port}/v1/completions`, seen, close: () => server.close() };
  }

  // A plain .mjs module of the benchmark, without types: imported by URL.
  const loadModule = (): Promise<{ load: (...args: unknown[]) => Promise<unknown> }> =>
    import(new URL('../bench/proxy-load.mjs', import.meta.url).href);

  it('never has more than maxInFlight requests open, whatever the rate asks', async () => {
    const { load } = await loadModule();
    const worker = await countingWorker();
    try {
      // At 10,000 a second every request is due at once: only the cap keeps them apart.
      await load(
        worker.url,
        { stream: true },
        { requests: 12, concurrency: 2, tokens: 2, rate: 10_000, maxInFlight: 2 },
      );
      expect(worker.seen.served).toBe(12);
      expect(worker.seen.most).toBe(2);
    } finally {
      worker.close();
    }
  }, 30_000);

  it('without maxInFlight, an open loop sends what is due whatever is in flight', async () => {
    const { load } = await loadModule();
    const worker = await countingWorker();
    try {
      await load(worker.url, { stream: true }, { requests: 12, concurrency: 2, tokens: 2, rate: 10_000 });
      expect(worker.seen.served).toBe(12);
      expect(worker.seen.most).toBeGreaterThan(2);
    } finally {
      worker.close();
    }
  }, 30_000);

  it('counts a failed request with its reason and goes on, in both loops', async () => {
    const { load } = await loadModule();
    const worker = await countingWorker(3);
    try {
      for (const loop of [{}, { rate: 10_000, maxInFlight: 2 }]) {
        const result = (await load(
          worker.url,
          { stream: true },
          { requests: 9, concurrency: 2, tokens: 2, ...loop },
        )) as {
          failed: number;
          failures: string[];
        };
        expect(result.failed).toBe(3);
        // The reason with the answer's own words, on one line.
        expect(result.failures).toEqual([`${worker.url}: status 500: {"error":{"message":"the engine failed"}}`]);
      }
      expect(worker.seen.served).toBe(18);
    } finally {
      worker.close();
    }
  }, 30_000);
});
