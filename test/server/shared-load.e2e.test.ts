// Replicas that balance as one: two proxies sharing their requests in flight through one real
// redis-server (--redis-url), a replica killed mid-run, and a Redis that goes away and comes back.
import OpenAI from 'openai';
import { afterEach, describe, expect, it } from 'vitest';
import { createProxy, type ProxyOptions, type ProxyServer } from '../../src/server/proxy.js';
import type { ProxyCore } from '../../src/server/proxy-core.js';
import type { FakeWorker } from '../../src/testing/index.js';
import { recordingLogger } from '../support/async.js';
import { serveBin } from '../support/bin.js';
import { eventually, eventuallyAsync, fakeWorkers } from '../support/http.js';
import { startRedis } from '../support/redis.js';
import { tool } from '../support/tools.js';

const redisServer = tool('redis-server', 'redis-server');
const fakes = fakeWorkers();
const cleanups: Array<() => unknown> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/** One prefill worker and four decode workers whose streams last while the test looks. */
async function fleet() {
  const prefill = await fakes.start({ role: 'prefill', protocol: 'vllm' });
  const decode: FakeWorker[] = [];
  for (let i = 0; i < 4; i++)
    decode.push(await fakes.start({ role: 'decode', protocol: 'vllm', tokens: 400, tokenIntervalMs: 10 }));
  return { prefill, decode };
}

async function replica(workers: Awaited<ReturnType<typeof fleet>>, options: Partial<ProxyOptions>) {
  const proxy: ProxyServer = createProxy({
    connector: 'vllm',
    prefill: [{ url: workers.prefill.url }],
    decode: workers.decode.map((worker) => ({ url: worker.url })),
    selection: 'least-in-flight',
    replicaSyncMs: 20,
    logger: recordingLogger().logger,
    ...options,
  });
  cleanups.push(() => proxy.close({ gracePeriodMs: 0, drainDelayMs: 0 }));
  const url = await proxy.listen(0);
  const core = (proxy as unknown as { core: ProxyCore }).core;
  const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'x', maxRetries: 0 });
  return { proxy, core, client, url };
}

/** The decode requests in flight a replica's policy sees: its own leases and the others' it was told of. */
function seen(core: ProxyCore): number {
  const pool = core.pools.all()[0];
  const view = core.sharedInFlight?.viewOf((worker: { url: string }) => `decode ${worker.url}`);
  return (pool?.decode.workers ?? []).reduce(
    (sum, worker) => sum + (pool?.decode.inFlight(worker) ?? 0) + (view?.inFlight(worker) ?? 0),
    0,
  );
}

/** Starts a long stream and waits for its first chunk (its decode worker leased). */
async function startStream(client: OpenAI, controller: AbortController) {
  const stream = await client.completions.create(
    { model: 'fake-model', prompt: 'Tell me a long story', max_tokens: 400, stream: true },
    { signal: controller.signal },
  );
  const reader = stream[Symbol.asyncIterator]();
  await reader.next();
  return reader;
}

/**
 * Two replicas routing prefill by session, sharing one Redis, over 4 prefill workers of which
 * the first `listed` are theirs at start (`p0`...), and one decode worker.
 */
async function sessionReplicas(listed: number) {
  const redis = await startRedis();
  cleanups.push(redis.close);
  const prefill: FakeWorker[] = [];
  for (let i = 0; i < 4; i++) prefill.push(await fakes.start({ role: 'prefill', protocol: 'vllm' }));
  const decode = await fakes.start({ role: 'decode', protocol: 'vllm', tokens: 2 });
  const replicas: Array<{ core: ProxyCore; client: OpenAI }> = [];
  for (let i = 0; i < 2; i++) {
    const proxy = createProxy({
      connector: 'vllm',
      prefill: prefill.slice(0, listed).map((worker, n) => ({ url: worker.url, name: `p${n}` })),
      decode: [{ url: decode.url }],
      prefillPolicy: 'session',
      redisUrl: redis.url,
      replicaSyncMs: 20,
      logger: recordingLogger().logger,
    });
    cleanups.push(() => proxy.close({ gracePeriodMs: 0, drainDelayMs: 0 }));
    const url = await proxy.listen(0);
    replicas.push({
      core: (proxy as unknown as { core: ProxyCore }).core,
      client: new OpenAI({ baseURL: `${url}/v1`, apiKey: 'x', maxRetries: 0 }),
    });
  }
  return { prefill, replicas };
}

const decodeCalls = (worker: FakeWorker) => worker.requests.filter((call) => call.path === '/v1/completions').length;

describe.skipIf(redisServer.skip)(`requests in flight shared through Redis (${redisServer.why})`, () => {
  it('two replicas sending 20 long streams alternately spread them over 4 decode workers within one of even', async () => {
    const redis = await startRedis();
    cleanups.push(redis.close);
    const workers = await fleet();
    const replicas = [await replica(workers, { redisUrl: redis.url }), await replica(workers, { redisUrl: redis.url })];
    const controller = new AbortController();
    cleanups.push(() => controller.abort());
    for (let i = 0; i < 20; i++) {
      const { client } = replicas[i % 2] as (typeof replicas)[number];
      await startStream(client, controller);
      // Both replicas know of every stream before the next one is routed (two sync rounds at most).
      await eventually(() => replicas.every(({ core }) => seen(core) === i + 1), `stream ${i} seen by both replicas`);
    }
    const spread = workers.decode.map(decodeCalls);
    expect(spread.reduce((a, b) => a + b, 0)).toBe(20);
    expect(Math.max(...spread) - Math.min(...spread)).toBeLessThanOrEqual(1);
    expect(replicas.map(({ core }) => core.sharedInFlight?.replicas)).toEqual([2, 2]);
  });

  it("an agent session's turns, alternating between replicas, all land on one prefill worker", async () => {
    const { replicas } = await sessionReplicas(4);
    for (const session of ['claude-1', 'claude-2', 'claude-3']) {
      const workers = new Set<string | null>();
      for (let turn = 0; turn < 6; turn++) {
        const { response } = await (replicas[turn % 2] as (typeof replicas)[number]).client.chat.completions
          .create(
            { model: 'fake-model', messages: [{ role: 'user', content: `turn ${turn}` }], max_tokens: 2 },
            { headers: { 'x-claude-code-session-id': session } },
          )
          .withResponse();
        workers.add(response.headers.get('x-disagg-prefill-worker'));
      }
      expect(workers.size, session).toBe(1);
    }
  });

  it('keeps each session on its bound prefill worker when a worker joins, on every replica (first binding wins)', async () => {
    // The fourth worker joins later.
    const { prefill, replicas } = await sessionReplicas(3);
    const turn = async (replica: number, session: string) => {
      const { response } = await (replicas[replica] as (typeof replicas)[number]).client.completions
        .create({ model: 'fake-model', prompt: 'next turn', max_tokens: 2 }, { headers: { 'x-session-id': session } })
        .withResponse();
      return response.headers.get('x-disagg-prefill-worker');
    };
    const sessions = Array.from({ length: 24 }, (_, i) => `agent-${i}`);
    const first = new Map<string, string | null>();
    for (const session of sessions) first.set(session, await turn(0, session));
    const store = replicas[0]?.core.sessionBindings;
    for (const session of sessions) {
      await eventuallyAsync(async () => (await store?.lookup(session))?.prefill !== undefined, `${session} bound`);
    }
    // A fourth prefill worker joins both replicas: by hashing alone about a quarter of the sessions would move to it.
    for (const { core } of replicas)
      core.pools.all()[0]?.prefill.add({ url: (prefill[3] as FakeWorker).url, name: 'p3' });
    for (const [i, session] of sessions.entries()) expect(await turn(i % 2, session), session).toBe(first.get(session));
    // A session new since the join may go to it, and binds there for every replica.
    const fresh = new Set<string | null>();
    // 48 of them: each goes there about one time in four, so all 48 elsewhere is one chance in a million.
    for (let i = 0; i < 48; i++) fresh.add(await turn(0, `new-${i}`));
    expect(fresh.has('worker') || fresh.has('p3')).toBe(true);
  });

  it('a worker one replica found down is passed over by the others until their own probes say', async () => {
    const redis = await startRedis();
    cleanups.push(redis.close);
    const workers = await fleet();
    const [finder, other] = [
      await replica(workers, { redisUrl: redis.url }),
      await replica(workers, { redisUrl: redis.url }),
    ];
    // The finder's health checks took decode worker 0 out (the other's probes still reach it).
    const suspect = finder.core.pools.workers('decode')[0] as { url: string };
    finder.core.pools.all()[0]?.decode.setAvailable(suspect as never, false);
    const view = other.core.sharedInFlight?.viewOf((worker: { url: string }) => `decode ${worker.url}`);
    await eventually(() => (view?.inFlight(suspect) ?? 0) >= 64, 'the verdict shared');
    for (let i = 0; i < 8; i++)
      await other.client.completions.create({ model: 'fake-model', prompt: 'Hi', max_tokens: 2 });
    expect(decodeCalls(workers.decode[0] as FakeWorker)).toBe(0);
    expect(
      workers.decode
        .slice(1)
        .map(decodeCalls)
        .reduce((a, b) => a + b, 0),
    ).toBe(8);
    // Back in the finder's rotation: the others try it again.
    finder.core.pools.all()[0]?.decode.setAvailable(suspect as never, true);
    await eventually(() => view?.inFlight(suspect) === 0, 'the verdict taken back');
  });

  it('a replica killed mid-run ages out of the others’ sums within eight sync rounds', async () => {
    const redis = await startRedis();
    cleanups.push(redis.close);
    const workers = await fleet();
    const local = await replica(workers, { redisUrl: redis.url });
    const other = await serveBin(
      [
        '--connector',
        'vllm',
        '--prefill',
        workers.prefill.url,
        '--decode',
        workers.decode.map((worker) => worker.url).join(','),
        '--selection',
        'least-in-flight',
        '--redis-url',
        redis.url,
        '--replica-sync-ms',
        '20',
      ],
      { cleanups },
    );
    const client = new OpenAI({ baseURL: `${other.url}/v1`, apiKey: 'x', maxRetries: 0 });
    const controller = new AbortController();
    cleanups.push(() => controller.abort());
    for (let i = 0; i < 3; i++) await startStream(client, controller);
    await eventually(() => seen(local.core) === 3, "the other replica's streams seen");
    expect(local.core.sharedInFlight?.replicas).toBe(2);
    // SIGKILL: no goodbye, its entry stays in Redis until it expires.
    const killedAt = Date.now();
    other.kill();
    await eventually(
      () => seen(local.core) === 0 && local.core.sharedInFlight?.replicas === 1,
      'the killed replica aged out',
      2000,
    );
    // Eight rounds of 20 ms, and one more to read it: no faster than the bound says, and not much slower.
    expect(Date.now() - killedAt).toBeGreaterThanOrEqual(100);
    controller.abort();
  });

  it('loses no request while Redis goes away and comes back: each replica balances alone meanwhile', async () => {
    const redis = await startRedis();
    cleanups.push(redis.close);
    const workers = await fleet();
    const replicas = [await replica(workers, { redisUrl: redis.url }), await replica(workers, { redisUrl: redis.url })];
    const ask = (i: number) =>
      (replicas[i % 2] as (typeof replicas)[number]).client.completions.create({
        model: 'fake-model',
        prompt: 'Hi',
        max_tokens: 2,
      });
    const answers = [];
    for (let i = 0; i < 4; i++) answers.push(await ask(i));
    await redis.stop();
    for (let i = 0; i < 4; i++) answers.push(await ask(i));
    await redis.start();
    await eventually(() => replicas.every(({ core }) => core.sharedInFlight?.replicas === 2), 'sharing again');
    for (let i = 0; i < 4; i++) answers.push(await ask(i));
    expect(answers.map((answer) => answer.choices[0]?.text)).toEqual(Array(12).fill('tok0 tok1 '));
  });
});
