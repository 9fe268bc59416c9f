// A failure that every request meets is logged once per interval with a count, not once per
// request: two replicas whose Redis fails under load (down, or answering some calls and not
// others), a prefill worker that is down. Nothing is lost: the counts the lines tell add up.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { request } from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import { REPEATED_LOG_INTERVAL_MS } from '../../src/runtime/repeated-log.js';
import { createProxy, type ProxyServer } from '../../src/server/proxy.js';
import { recordingLogger } from '../support/async.js';
import { fakeWorkers } from '../support/http.js';
import { startRedis } from '../support/redis.js';
import { tool } from '../support/tools.js';

const redisServer = tool('redis-server', 'redis-server');
const fakes = fakeWorkers();
const cleanups: Array<() => unknown> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

type Line = { level: number; msg: string; repeats?: number };

/** The three parts of a replica that use Redis, each by the start of its failure and recovery lines. */
const CONCERNS = {
  limits: ['Redis is unreachable', 'Redis answers again'],
  bindings: ['Cannot read or write session bindings', 'Session bindings are shared again'],
  inFlight: ['Cannot share requests in flight', 'Sharing requests in flight with the other replicas again'],
} as const;

const concernOf = (line: Line) =>
  (Object.keys(CONCERNS) as Array<keyof typeof CONCERNS>).find((concern) =>
    CONCERNS[concern].some((start) => line.msg.startsWith(start)),
  );

/** Two replicas sharing `redisUrl`, routing prefill by session, limiting two tenants; each logging pino's JSON lines. */
async function replicas(redisUrl: string) {
  const file = join(mkdtempSync(join(tmpdir(), 'disagg-tenants-')), 'tenants.yaml');
  writeFileSync(
    file,
    [
      'tenants:',
      '  - { name: alice, keys: [sk-alice-0000001], requestsPerMinute: 1000000 }',
      '  - { name: bob, keys: [sk-bob-00000001], requestsPerMinute: 1000000 }',
      '',
    ].join('\n'),
  );
  const prefill = [
    await fakes.start({ role: 'prefill', protocol: 'vllm' }),
    await fakes.start({ role: 'prefill', protocol: 'vllm' }),
  ];
  const decode = await fakes.start({ role: 'decode', protocol: 'vllm', tokens: 1 });
  const started: Array<{ proxy: ProxyServer; url: string; lines: Line[] }> = [];
  for (let i = 0; i < 2; i++) {
    const lines: Line[] = [];
    const proxy = createProxy({
      connector: 'vllm',
      prefill: prefill.map((worker) => ({ url: worker.url })),
      decode: [{ url: decode.url }],
      prefillPolicy: 'session',
      tenantsFile: file,
      redisUrl,
      replicaSyncMs: 20,
      logger: pino({ level: 'info' }, { write: (line: string) => void lines.push(JSON.parse(line) as Line) }),
    });
    cleanups.push(() => proxy.close({ gracePeriodMs: 0, drainDelayMs: 0 }));
    started.push({ proxy, url: await proxy.listen(0), lines });
  }
  return started;
}

/** `clients` clients (20), `each` requests apiece, spread over both replicas, both tenants and 20 sessions; the statuses. */
async function load(urls: string[], each: number, clients = 20): Promise<number[]> {
  const statuses: number[] = [];
  await Promise.all(
    Array.from({ length: clients }, async (_, client) => {
      for (let i = 0; i < each; i++) {
        // Each client alternates tenants and sessions, and both replicas see each of them.
        const answer = await request(`${urls[(client + Math.floor(i / 2)) % 2]}/v1/completions`, {
          method: 'POST',
          headers: {
            'content-type': 'application/json',
            authorization: (client + i) % 2 === 0 ? 'Bearer sk-alice-0000001' : 'Bearer sk-bob-00000001',
            'x-session-id': `s${(client + i) % 20}`,
          },
          body: JSON.stringify({ model: 'fake-model', prompt: `hi ${client} ${i}`, max_tokens: 1 }),
        });
        await answer.body.text();
        statuses.push(answer.statusCode);
      }
    }),
  );
  return statuses;
}

const metric = async (url: string, name: string) =>
  Number(new RegExp(`^${name} (\\S+)$`, 'm').exec(await (await request(`${url}/metrics`)).body.text())?.[1] ?? 0);

describe.skipIf(redisServer.skip)(`what replicas log while Redis fails (${redisServer.why})`, () => {
  it('Redis down, then answering some calls and not others, under 20 clients on two replicas: a few lines per replica, not one per request, and their counts add up', async () => {
    const redis = await startRedis();
    cleanups.push(redis.close);
    const fleet = await replicas(redis.url);
    const urls = fleet.map((replica) => replica.url);
    const began = performance.now();
    // Down: every call to Redis fails.
    await redis.stop();
    const down = await load(urls, 10);
    // Back: until each replica has heard Redis again in all three of its parts.
    await redis.start();
    const recovered = () =>
      fleet.every(({ lines }) =>
        Object.values(CONCERNS).every(([, recovery]) => lines.some((line) => line.msg.startsWith(recovery))),
      );
    for (let round = 0; round < 300 && !recovered(); round++) await load(urls, 1);
    expect(recovered()).toBe(true);
    // Flapping: bob's minute of buckets and half the sessions' bindings made lists (another
    // program writing the keys, an operator's mistake): those calls fail, the others work.
    const { Redis } = await import('ioredis');
    const admin = new Redis(redis.url);
    cleanups.push(() => admin.disconnect());
    const [seconds] = (await admin.time()) as [number | string, number | string];
    const lists = admin.pipeline();
    const list = (key: string) => lists.del(key).lpush(key, 'x');
    for (let at = Number(seconds) - 60; at <= Number(seconds) + 120; at++) list(`disagg:limits:{bob}:r:${at}`);
    for (let session = 0; session < 20; session += 2) {
      for (const role of ['prefill', 'decode']) list(`disagg:sessions:{s${session}}:${role}`);
    }
    await lists.exec();
    // One client, so that on each replica a call that fails and one that works take turns.
    const flapping = await load(urls, 200, 1);
    // No request lost to Redis's failures (--redis-failure open).
    expect([...down, ...flapping].every((status) => status === 200)).toBe(true);
    const failures = await Promise.all(urls.map((url) => metric(url, 'disagg_redis_failures_total')));
    const elapsedMs = performance.now() - began;
    // The close tells what was counted and not yet told.
    await Promise.all(fleet.map(({ proxy }) => proxy.close({ gracePeriodMs: 0, drainDelayMs: 0 })));
    // Per part and interval at most a failure, a recovery and the count of each, and a count at the close.
    const bound = 4 * (1 + Math.floor(elapsedMs / REPEATED_LOG_INTERVAL_MS)) + 1;
    fleet.forEach(({ lines }, replica) => {
      const byConcern = Object.fromEntries(
        (Object.keys(CONCERNS) as Array<keyof typeof CONCERNS>).map((concern) => [
          concern,
          lines.filter((line) => concernOf(line) === concern),
        ]),
      ) as Record<keyof typeof CONCERNS, Line[]>;
      for (const concern of Object.keys(CONCERNS) as Array<keyof typeof CONCERNS>) {
        expect(byConcern[concern].length, `replica ${replica}: ${concern}`).toBeLessThanOrEqual(bound);
      }
      // Both ways of failing were seen, and logged at error.
      expect(byConcern.limits.filter((line) => line.level === 50).length).toBeGreaterThan(0);
      expect(byConcern.bindings.filter((line) => line.level === 50).length).toBeGreaterThan(0);
      // Nothing lost: each failure line is one failed call, or the `repeats` it tells of.
      const told = byConcern.limits
        .filter((line) => line.msg.startsWith(CONCERNS.limits[0]))
        .reduce((sum, line) => sum + (line.repeats ?? 1), 0);
      expect(told, `replica ${replica}: limits' failures told`).toBe(failures[replica]);
      expect(failures[replica]).toBeGreaterThan(bound);
    });
  });
});

/** The lines of `records` whose message starts with `start`, and the occurrences they stand for (a line, or the `repeats` it tells of). */
function told(records: ReturnType<typeof recordingLogger>['records'], start: string) {
  const lines = records.filter((record) => record.message?.startsWith(start));
  const occurrences = lines.reduce((sum, line) => sum + ((line.fields as { repeats?: number }).repeats ?? 1), 0);
  return { lines: lines.length, occurrences };
}

/**
 * `count` completions one after another, each answered `status`; how many log intervals they
 * spanned (the bound on a repeated line's count, however slow the machine).
 */
async function completions(url: string, count: number, headers: Record<string, string>, status: number) {
  const began = performance.now();
  for (let i = 0; i < count; i++) {
    const answer = await request(`${url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...headers },
      body: JSON.stringify({ model: 'fake-model', prompt: `hi ${i}`, max_tokens: 1 }),
    });
    await answer.body.text();
    expect(answer.statusCode).toBe(status);
  }
  return 1 + Math.floor((performance.now() - began) / REPEATED_LOG_INTERVAL_MS);
}

describe('what the proxy logs while a worker is down', () => {
  it('the only prefill worker down: "No prefill worker is available" once, then its count, not once per request', async () => {
    const prefill = await fakes.start({ role: 'prefill', protocol: 'vllm' });
    const decode = await fakes.start({ role: 'decode', protocol: 'vllm', tokens: 1 });
    await prefill.close();
    const { logger, records } = recordingLogger();
    const proxy = createProxy({
      connector: 'vllm',
      prefill: [{ url: prefill.url }],
      decode: [{ url: decode.url }],
      logger,
    });
    // Served on decode alone, as the reference router does.
    const intervals = await completions(await proxy.listen(0), 50, {}, 200);
    await proxy.close({ gracePeriodMs: 0, drainDelayMs: 0 });
    // A line, and one with the count of the rest (per interval, however slow the machine).
    const noPrefill = told(records, 'No prefill worker is available');
    expect(noPrefill.occurrences).toBe(50);
    expect(noPrefill.lines).toBeGreaterThanOrEqual(2);
    expect(noPrefill.lines).toBeLessThanOrEqual(2 * intervals);
    // Each request's own line still says so.
    const finished = records.filter((record) => record.message === 'request finished');
    expect(finished.map((record) => (record.fields as { aggregatedBecause?: string }).aggregatedBecause)).toEqual(
      Array(50).fill('no-prefill-worker'),
    );
  });

  it("a sidecar's prefill target that is down: its retries once, then their count, not once per request", async () => {
    const prefill = await fakes.start({ role: 'prefill', protocol: 'vllm' });
    const decode = await fakes.start({ role: 'decode', protocol: 'vllm', tokens: 1 });
    await prefill.close();
    const { logger, records } = recordingLogger();
    const proxy = createProxy({
      connector: 'vllm',
      decode: [{ url: decode.url }],
      sidecar: { prefillFrom: 'header', prefillAllow: ['127.0.0.1'], prefillMaxRetries: 2 },
      retry: { initialBackoffMs: 1, maxBackoffMs: 1 },
      logger,
    });
    const target = { 'x-prefiller-host-port': new URL(prefill.url).host };
    const intervals = await completions(await proxy.listen(0), 30, target, 502);
    await proxy.close({ gracePeriodMs: 0, drainDelayMs: 0 });
    // Two retries per request, 60 in all: a line, and one with the count of the rest.
    const retries = told(records, 'Retrying the request');
    expect(retries.occurrences).toBe(60);
    expect(retries.lines).toBeGreaterThanOrEqual(2);
    expect(retries.lines).toBeLessThanOrEqual(2 * intervals);
  });
});
