import { MockAgent } from 'undici';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { WorkerPool } from '../../../src/flow/worker-pool.js';
import { UpstreamError } from '../../../src/http/upstream-error.js';
import { HealthChecker, type HealthOptions, probeHint } from '../../../src/server/fleet/health.js';

type Named = { url: string };
const agents: MockAgent[] = [];
const checkers: HealthChecker[] = [];
afterEach(async () => {
  vi.useRealTimers();
  for (const checker of checkers.splice(0)) checker.stop();
  await Promise.all(agents.splice(0).map((agent) => agent.close()));
});

/**
 * A checker over one prefill and one decode worker (or the given ones), probing through a
 * MockAgent: `answer(worker, status or error)` queues what the worker's next `GET /health` gets.
 */
function setup(options: Partial<HealthOptions> = {}, urls = { prefill: ['http://p0'], decode: ['http://d0'] }) {
  const agent = new MockAgent();
  agent.disableNetConnect();
  agents.push(agent);
  const prefill = new WorkerPool<Named>(urls.prefill.map((url) => ({ url })));
  const decode = new WorkerPool<Named>(urls.decode.map((url) => ({ url })));
  const logs: Array<{ level: string; fields: Record<string, unknown>; message: string | undefined }> = [];
  const log = (level: string) => (fields: object, message?: string) =>
    logs.push({ level, fields: fields as Record<string, unknown>, message });
  const probes: Array<{ url: string; headers: Record<string, string> }> = [];
  const checker = new HealthChecker(
    [
      { role: 'prefill', pool: prefill },
      { role: 'decode', pool: decode },
    ],
    {
      logger: { error: log('error'), warn: log('warn'), info: log('info'), debug: log('debug') },
      dispatcher: agent,
      headers: { authorization: 'Bearer worker-key' },
      ...options,
    },
  );
  checkers.push(checker);
  const answer = (worker: Named, outcome: number | Error, onProbe?: () => void) => {
    const scope = agent.get(worker.url).intercept({ path: '/health', method: 'GET' });
    if (outcome instanceof Error) scope.replyWithError(outcome);
    else
      scope.reply((request) => {
        probes.push({ url: worker.url, headers: request.headers as Record<string, string> });
        onProbe?.();
        return { statusCode: outcome, data: '' };
      });
  };
  const [p0, d0] = [prefill.workers[0] as Named, decode.workers[0] as Named];
  return { checker, prefill, decode, p0, d0, answer, logs, probes };
}

const refused = () => Object.assign(new Error('connect ECONNREFUSED 10.0.0.1:8000'), { code: 'ECONNREFUSED' });
const status = (url: string, code: number) => UpstreamError.fromStatus(url, code, '{"message":"boom"}');

describe('HealthChecker probes', () => {
  it('a worker that fails GET /health leaves rotation, with the status and a hint, and comes back at its first 200', async () => {
    const { checker, decode, p0, d0, answer, logs, probes } = setup();
    answer(p0, 200);
    answer(d0, 404);
    await checker.check();
    expect(decode.isAvailable(d0)).toBe(false);
    expect(logs).toStrictEqual([
      {
        level: 'warn',
        fields: {
          url: 'http://d0',
          role: 'decode',
          status: 404,
          hint: 'the worker has no /health: is the URL the root of a vLLM or SGLang server?',
        },
        message: 'Worker failed its health check (GET /health answered 404); out of rotation',
      },
    ]);
    expect(probes.map((probe) => probe.headers.authorization)).toEqual(['Bearer worker-key', 'Bearer worker-key']);
    answer(p0, 200);
    answer(d0, 200);
    await checker.check();
    expect(decode.isAvailable(d0)).toBe(true);
    expect(logs.slice(1)).toEqual([
      { level: 'info', fields: { url: 'http://d0', role: 'decode' }, message: 'Worker back in rotation' },
    ]);
  });

  it('probe thresholds: a run of failures takes a worker out and a run of successes brings it back; a result that agrees with its state resets the run', async () => {
    const { checker, prefill, p0, d0, answer } = setup({ probeThresholds: { failure: 2, success: 3 } });
    const round = async (outcome: number) => {
      answer(p0, outcome);
      answer(d0, 200);
      await checker.check();
      return prefill.isAvailable(p0);
    };
    // The first probe decides at once (see below); the thresholds count from there.
    expect(await round(200)).toBe(true);
    expect(await round(503)).toBe(true);
    expect(await round(200)).toBe(true);
    expect(await round(503)).toBe(true);
    expect(await round(503)).toBe(false);
    expect(await round(200)).toBe(false);
    expect(await round(200)).toBe(false);
    expect(await round(503)).toBe(false);
    expect(await round(200)).toBe(false);
    expect(await round(200)).toBe(false);
    expect(await round(200)).toBe(true);
  });

  it("a worker's first probe decides at once, whatever the thresholds: a 404 there takes it out, logged with the hint", async () => {
    const { checker, prefill, decode, p0, d0, answer, logs } = setup({ probeThresholds: { failure: 3, success: 2 } });
    answer(p0, 404);
    answer(d0, 200);
    await checker.check();
    expect([prefill.isAvailable(p0), decode.isAvailable(d0)]).toEqual([false, true]);
    expect(logs).toContainEqual({
      level: 'warn',
      fields: expect.objectContaining({
        url: 'http://p0',
        status: 404,
        hint: probeHint(404, undefined),
      }),
      message: 'Worker failed its health check (GET /health answered 404); out of rotation',
    });
    // Later failures wait for the threshold again.
    answer(p0, 200);
    answer(d0, 503);
    await checker.check();
    expect(decode.isAvailable(d0)).toBe(true);
  });

  it('a worker that cannot be reached leaves at once, whatever the threshold, with its code and a hint', async () => {
    const { checker, prefill, p0, d0, answer, logs } = setup({ probeThresholds: { failure: 5, success: 1 } });
    answer(p0, refused());
    answer(d0, 200);
    await checker.check();
    expect(prefill.isAvailable(p0)).toBe(false);
    expect(logs).toHaveLength(1);
    expect(logs[0]).toMatchObject({
      level: 'warn',
      fields: {
        url: 'http://p0',
        role: 'prefill',
        code: 'ECONNREFUSED',
        err: expect.any(Error),
        hint: 'nothing listens there: is the worker up, and the port right?',
      },
      message: 'Worker failed its health check (ECONNREFUSED); out of rotation',
    });
    expect('status' in (logs[0]?.fields ?? {})).toBe(false);
  });

  it('names and hints: ENOTFOUND and EAI_AGAIN are unreachable too; a timeout is TIMEOUT; a failure without a code says no answer', async () => {
    for (const [error, code, hint, out] of [
      [
        Object.assign(new Error('getaddrinfo'), { code: 'ENOTFOUND' }),
        'ENOTFOUND',
        'the host name does not resolve',
        true,
      ],
      [
        Object.assign(new Error('getaddrinfo'), { code: 'EAI_AGAIN' }),
        'EAI_AGAIN',
        'the host name does not resolve',
        true,
      ],
      [
        Object.assign(new Error('The operation was aborted due to timeout'), { name: 'TimeoutError' }),
        'TIMEOUT',
        'no answer in time: a firewall, or an overloaded worker',
        false,
      ],
      [
        new Error('fetch failed', { cause: Object.assign(new Error('connect'), { code: 'ECONNREFUSED' }) }),
        'ECONNREFUSED',
        'nothing listens there: is the worker up, and the port right?',
        true,
      ],
      [new Error('something odd'), undefined, undefined, false],
    ] as const) {
      const { checker, prefill, p0, d0, answer, logs } = setup({ probeThresholds: { failure: 2, success: 1 } });
      // A first probe decides at once; the thresholds apply from the second.
      answer(p0, 200);
      answer(d0, 200);
      await checker.check();
      answer(p0, error);
      answer(d0, 200);
      await checker.check();
      expect(prefill.isAvailable(p0)).toBe(!out);
      if (out) expect(logs[0]?.fields).toMatchObject({ code, hint });
      answer(p0, error);
      answer(d0, 200);
      await checker.check();
      expect(prefill.isAvailable(p0)).toBe(false);
      const warned = logs.filter((entry) => entry.level === 'warn');
      expect(warned).toHaveLength(1);
      expect(warned[0]?.message).toBe(`Worker failed its health check (${code ?? 'no answer'}); out of rotation`);
      expect(warned[0]?.fields.code).toBe(code);
      expect(warned[0]?.fields.hint).toBe(hint);
      expect('code' in (warned[0]?.fields ?? {})).toBe(code !== undefined);
      expect('hint' in (warned[0]?.fields ?? {})).toBe(hint !== undefined);
      // What the admin API shows of the worker says the same.
      expect(checker.lastFailure(p0)).toStrictEqual({
        reason: code ?? 'no answer',
        ...(hint === undefined ? {} : { hint }),
      });
    }
  });

  it("a probe that succeeds clears the worker's last failure; one that fails records it", async () => {
    const { checker, p0, d0, answer } = setup();
    answer(p0, 200);
    answer(d0, 503);
    await checker.check();
    expect(checker.lastFailure(p0)).toBeUndefined();
    expect(checker.lastFailure(d0)).toStrictEqual({ reason: 'GET /health answered 503' });
    // A worker known only from its probes has a closed circuit.
    expect(checker.circuit(d0)).toBe('closed');
    answer(p0, 200);
    answer(d0, 200);
    await checker.check();
    expect(checker.lastFailure(d0)).toBeUndefined();
  });

  it('a worker that leaves its pool while its probe is out is left alone, and the round completes', async () => {
    for (const outcome of [503, 200]) {
      const afterRound = vi.fn(async () => {});
      const { checker, prefill, p0, d0, answer, logs } = setup({ afterRound });
      prefill.setAvailable(p0, outcome !== 200);
      answer(p0, outcome, () => {
        void prefill.remove(p0);
      });
      answer(d0, 200);
      await checker.check();
      expect(prefill.has(p0)).toBe(false);
      expect(logs).toEqual([]);
      expect(afterRound).toHaveBeenCalledTimes(1);
    }
  });

  it('each probe may take timeoutMs (2 s by default)', async () => {
    const timeout = vi.spyOn(AbortSignal, 'timeout');
    const defaults = setup();
    defaults.answer(defaults.p0, 200);
    defaults.answer(defaults.d0, 200);
    await defaults.checker.check();
    expect(timeout.mock.calls).toEqual([[2000], [2000]]);
    const quick = setup({ timeoutMs: 250 });
    quick.answer(quick.p0, 200);
    quick.answer(quick.d0, 200);
    await quick.checker.check();
    expect(timeout.mock.calls.slice(2)).toEqual([[250], [250]]);
  });

  it("its timers never keep the process alive: the probe interval and the circuits' trials", () => {
    const interval = vi.spyOn(globalThis, 'setInterval');
    const timeout = vi.spyOn(globalThis, 'setTimeout');
    const { checker, d0 } = setup({ breaker: { failureThreshold: 1, successThreshold: 1, openMs: 60_000 } });
    checker.start();
    checker.noteFailure(status('http://d0/v1/completions', 500), { decode: d0 });
    const timers = [...interval.mock.results, ...timeout.mock.results].map((result) => result.value as NodeJS.Timeout);
    expect(timers).toHaveLength(2);
    expect(timers.map((timer) => timer.hasRef())).toEqual([false, false]);
  });

  it('one round at a time: a check while one runs joins it; afterRound runs after each, and its failure does not fail the round', async () => {
    let rounds = 0;
    const afterRound = vi.fn(async () => {
      rounds += 1;
      if (rounds === 1) throw new Error('models unreadable');
    });
    const { checker, p0, d0, answer, probes } = setup({ afterRound });
    answer(p0, 200);
    answer(d0, 200);
    const first = checker.check();
    expect(checker.check()).toBe(first);
    await expect(first).resolves.toBeUndefined();
    expect(probes).toHaveLength(2);
    expect(afterRound).toHaveBeenCalledTimes(1);
    answer(p0, 200);
    answer(d0, 200);
    const second = checker.check();
    expect(second).not.toBe(first);
    await second;
    expect(probes).toHaveLength(4);
    expect(afterRound).toHaveBeenCalledTimes(2);
  });

  it('start probes every intervalMs (5 s by default) until stop; starting twice keeps one timer', async () => {
    vi.useFakeTimers();
    const { checker } = setup();
    const check = vi.spyOn(checker, 'check').mockResolvedValue(undefined);
    checker.start();
    checker.start();
    await vi.advanceTimersByTimeAsync(4999);
    expect(check).toHaveBeenCalledTimes(0);
    await vi.advanceTimersByTimeAsync(1);
    expect(check).toHaveBeenCalledTimes(1);
    await vi.advanceTimersByTimeAsync(5000);
    expect(check).toHaveBeenCalledTimes(2);
    checker.stop();
    await vi.advanceTimersByTimeAsync(20_000);
    expect(check).toHaveBeenCalledTimes(2);
    const custom = setup({ intervalMs: 100 }).checker;
    const customCheck = vi.spyOn(custom, 'check').mockRejectedValue(new Error('round failed'));
    custom.start();
    await vi.advanceTimersByTimeAsync(250);
    expect(customCheck).toHaveBeenCalledTimes(2);
  });
});

describe('HealthChecker.admit', () => {
  it('a joining worker is probed once: in rotation at a 200, out otherwise; unknown roles and workers are refused', async () => {
    const { checker, decode, answer, probes } = setup();
    const joining = { url: 'http://d1' };
    // Not (yet) a worker of the pool: not even probed.
    const stranger = { url: 'http://d9' };
    answer(stranger, 200);
    expect(await checker.admit('decode', stranger)).toBe(false);
    expect(probes).toEqual([]);
    expect(await checker.admit('decode', joining)).toBe(false);
    decode.add(joining, { available: false });
    expect(await checker.admit('router', joining)).toBe(false);
    answer(joining, 503);
    expect(await checker.admit('decode', joining)).toBe(false);
    expect(decode.isAvailable(joining)).toBe(false);
    answer(joining, 200);
    expect(await checker.admit('decode', joining)).toBe(true);
    expect(decode.isAvailable(joining)).toBe(true);
    // Already in rotation: no probe needed.
    const probed = probes.length;
    answer(joining, 503);
    expect(await checker.admit('decode', joining)).toBe(true);
    expect(probes).toHaveLength(probed);
  });

  it('a worker removed and forgotten while its probe was out leaves no record behind', async () => {
    const { checker, decode, answer } = setup();
    const joining = { url: 'http://d1' };
    decode.add(joining, { available: false });
    answer(joining, 503, () => {
      void decode.remove(joining);
      checker.forget(joining);
    });
    expect(await checker.admit('decode', joining)).toBe(false);
    expect(checker.lastFailure(joining)).toBeUndefined();
  });

  it('a worker that started draining while its probe was out is not put back', async () => {
    const { checker, decode, answer } = setup();
    const joining = { url: 'http://d1' };
    decode.add(joining, { available: false });
    answer(joining, 200, () => {
      void decode.drain(joining);
    });
    expect(await checker.admit('decode', joining)).toBe(false);
  });

  it('a worker still finishing requests that started draining while its probe was out stays out of rotation', async () => {
    const { checker, decode, answer } = setup();
    const busy = { url: 'http://d1' };
    decode.add(busy);
    decode.setAvailable(decode.workers[0] as Named, false);
    const lease = decode.acquire();
    decode.setAvailable(busy, false);
    answer(busy, 200, () => {
      void decode.drain(busy);
    });
    expect(await checker.admit('decode', busy)).toBe(false);
    expect([decode.stateOf(busy), decode.isAvailable(busy)]).toEqual(['draining', false]);
    lease.release();
  });
});

describe('HealthChecker circuit breaker', () => {
  const breaker = { failureThreshold: 2, successThreshold: 2, openMs: 1000 };

  it('a circuit opened by one failure says so in the singular, and names its worker by name and url', () => {
    const { checker, decode, logs } = setup({ breaker: { ...breaker, failureThreshold: 1 } });
    const named = { url: 'http://d1', name: 'decode-a' };
    decode.add(named);
    checker.noteFailure(status('http://d1/v1/completions', 500), { decode: named });
    expect(logs).toEqual([
      {
        level: 'warn',
        fields: {
          worker: 'decode-a',
          url: 'http://d1',
          role: 'decode',
          failures: 1,
          openMs: 1000,
          err: expect.any(UpstreamError),
        },
        message: 'Worker circuit open after one failed request in a row; out of rotation for 1000 ms',
      },
    ]);
  });

  it('failureThreshold failures in a row open it (out of rotation); after openMs it is half-open (back, on trial); successThreshold successes close it', async () => {
    vi.useFakeTimers();
    const { checker, decode, d0, logs } = setup({ breaker });
    const workers = { decode: d0 };
    checker.noteFailure(status('http://d0/v1/completions', 500), workers);
    expect([checker.circuit(d0), decode.isAvailable(d0)]).toEqual(['closed', true]);
    checker.noteFailure(status('http://d0/v1/completions', 503), workers);
    expect([checker.circuit(d0), decode.isAvailable(d0)]).toEqual(['open', false]);
    expect(logs).toEqual([
      {
        level: 'warn',
        fields: { url: 'http://d0', role: 'decode', failures: 2, openMs: 1000, err: expect.any(UpstreamError) },
        message: 'Worker circuit open after 2 failed requests in a row; out of rotation for 1000 ms',
      },
    ]);
    // More failures while open change nothing (they come from requests already under way).
    checker.noteFailure(status('http://d0/v1/completions', 500), workers);
    await vi.advanceTimersByTimeAsync(999);
    expect(decode.isAvailable(d0)).toBe(false);
    await vi.advanceTimersByTimeAsync(1);
    expect([checker.circuit(d0), decode.isAvailable(d0)]).toEqual(['half-open', true]);
    expect(logs[1]).toEqual({
      level: 'info',
      fields: { url: 'http://d0', role: 'decode' },
      message: 'Worker circuit half-open: back in rotation on trial',
    });
    checker.noteSuccess(workers);
    expect(checker.circuit(d0)).toBe('half-open');
    checker.noteSuccess(workers);
    expect(checker.circuit(d0)).toBe('closed');
    expect(logs[2]).toEqual({
      level: 'info',
      fields: { url: 'http://d0', role: 'decode' },
      message: 'Worker circuit closed after its trial',
    });
  });

  it('a success on a closed circuit resets its failures and nothing more: no trial to end, nothing logged', () => {
    const { checker, d0, logs } = setup({ breaker: { ...breaker, successThreshold: 1 } });
    checker.noteFailure(status('http://d0/v1/completions', 500), { decode: d0 });
    checker.noteSuccess({ decode: d0 });
    checker.noteSuccess({ decode: d0 });
    checker.noteFailure(status('http://d0/v1/completions', 500), { decode: d0 });
    expect(checker.circuit(d0)).toBe('closed');
    expect(logs).toEqual([]);
  });

  it('one failure on trial opens it again at once; a success between failures resets the count', async () => {
    vi.useFakeTimers();
    const { checker, decode, d0 } = setup({ breaker });
    const workers = { decode: d0 };
    const fail = () => checker.noteFailure(status('http://d0/generate', 500), workers);
    fail();
    checker.noteSuccess(workers);
    fail();
    expect(checker.circuit(d0)).toBe('closed');
    fail();
    expect(checker.circuit(d0)).toBe('open');
    await vi.advanceTimersByTimeAsync(1000);
    checker.noteSuccess(workers);
    fail();
    expect([checker.circuit(d0), decode.isAvailable(d0)]).toEqual(['open', false]);
    // The next trial starts its count of successes afresh: one is not enough.
    await vi.advanceTimersByTimeAsync(1000);
    checker.noteSuccess(workers);
    expect(checker.circuit(d0)).toBe('half-open');
  });

  it('the failures a trial failure reports are its own: the count starts afresh at half-open', async () => {
    vi.useFakeTimers();
    const { checker, d0, logs } = setup({ breaker });
    const fail = () => checker.noteFailure(status('http://d0/generate', 500), { decode: d0 });
    fail();
    fail();
    await vi.advanceTimersByTimeAsync(1000);
    fail();
    const opened = logs.filter((entry) => entry.level === 'warn').map((entry) => entry.fields.failures);
    expect(opened).toEqual([2, 1]);
  });

  it('an open circuit keeps its worker out whatever /health says, until its trial', async () => {
    const { checker, decode, p0, d0, answer } = setup({ breaker: { ...breaker, failureThreshold: 1 } });
    checker.noteFailure(status('http://d0/v1/completions', 500), { decode: d0 });
    answer(p0, 200);
    answer(d0, 200);
    await checker.check();
    expect(decode.isAvailable(d0)).toBe(false);
  });

  it("what counts: the worker's own failures (5xx, a broken stream, a protocol error), not a 4xx, not another worker's, not a non-worker error", () => {
    const { checker, p0, d0 } = setup({ breaker: { ...breaker, failureThreshold: 1 } });
    const workers = { prefill: p0, decode: d0 };
    checker.noteFailure(status('http://d0/v1/completions', 400), workers);
    checker.noteFailure(status('http://d0/v1/completions', 429), workers);
    checker.noteFailure(new Error('client left'), workers);
    checker.noteFailure(status('http://elsewhere/v1/completions', 500), workers);
    checker.noteFailure(status('http://d01/v1/completions', 500), workers);
    expect([checker.circuit(p0), checker.circuit(d0)]).toEqual(['closed', 'closed']);
    const broken = UpstreamError.fromFailure('http://p0/v1/completions', refused(), { afterResponse: true });
    checker.noteFailure(new Error('the flow failed', { cause: broken }), workers);
    expect([checker.circuit(p0), checker.circuit(d0)]).toEqual(['open', 'closed']);
    const garbled = new UpstreamError('protocol', 'garbled', { url: 'http://d0/v1/completions' });
    checker.noteFailure(garbled, { decode: d0 });
    expect(checker.circuit(d0)).toBe('open');
  });

  it('a worker that could not be reached by a request leaves rotation at once (no circuit), with a warning, once', () => {
    const { checker, prefill, p0, d0, logs } = setup({ breaker });
    const unreachable = UpstreamError.fromFailure('http://p0/v1/completions', refused());
    checker.noteFailure(unreachable, { prefill: p0, decode: d0 });
    expect([prefill.isAvailable(p0), checker.circuit(p0)]).toEqual([false, 'closed']);
    checker.noteFailure(unreachable, { prefill: p0 });
    expect(logs).toEqual([
      {
        level: 'warn',
        fields: { url: 'http://p0', role: 'prefill' },
        message: 'Worker unreachable; out of rotation until it answers a probe',
      },
    ]);
    checker.failed('router', p0);
    checker.failed('prefill', { url: 'http://p0' });
    expect(logs).toHaveLength(1);
  });

  it('without a breaker nothing is counted; a worker URL given with a trailing slash still matches', () => {
    const off = setup(undefined, { prefill: ['http://p0/'], decode: ['http://d0'] });
    off.checker.noteFailure(status('http://p0/v1/completions', 500), { prefill: off.p0 });
    expect(off.checker.circuit(off.p0)).toBe('closed');
    const on = setup(
      { breaker: { ...breaker, failureThreshold: 1 } },
      { prefill: ['http://p0/'], decode: ['http://d0'] },
    );
    on.checker.noteFailure(status('http://p0/v1/completions', 500), { prefill: on.p0 });
    expect(on.checker.circuit(on.p0)).toBe('open');
  });

  it('forget and stop end the timers: a forgotten or stopped worker is not put back by its trial', async () => {
    vi.useFakeTimers();
    const { checker, decode, prefill, p0, d0 } = setup({ breaker: { ...breaker, failureThreshold: 1 } });
    checker.noteFailure(status('http://d0/v1/completions', 500), { decode: d0 });
    checker.noteFailure(status('http://p0/v1/completions', 500), { prefill: p0 });
    checker.forget(d0);
    expect(checker.circuit(d0)).toBe('closed');
    checker.stop();
    await vi.advanceTimersByTimeAsync(5000);
    expect([decode.isAvailable(d0), prefill.isAvailable(p0)]).toEqual([false, false]);
  });

  it('a worker removed while its circuit is open is not touched by its trial', async () => {
    vi.useFakeTimers();
    const { checker, decode, d0 } = setup({ breaker: { ...breaker, failureThreshold: 1 } });
    checker.noteFailure(status('http://d0/v1/completions', 500), { decode: d0 });
    await decode.remove(d0);
    await vi.advanceTimersByTimeAsync(1000);
    expect(checker.circuit(d0)).toBe('half-open');
    expect(decode.has(d0)).toBe(false);
    // A failure on a worker no longer in the pool starts no circuit.
    const gone = { url: 'http://gone' };
    checker.noteFailure(status('http://gone/v1/completions', 500), { decode: gone });
    expect(checker.circuit(gone)).toBe('closed');
  });
});

describe('probeHint', () => {
  it.each([
    [401, undefined, 'the worker wants a key: set --worker-api-key to its --api-key'],
    [403, undefined, 'the worker wants a key: set --worker-api-key to its --api-key'],
    [404, undefined, 'the worker has no /health: is the URL the root of a vLLM or SGLang server?'],
    [undefined, 'ECONNREFUSED', 'nothing listens there: is the worker up, and the port right?'],
    [undefined, 'ENOTFOUND', 'the host name does not resolve'],
    [undefined, 'EAI_AGAIN', 'the host name does not resolve'],
    [undefined, 'TIMEOUT', 'no answer in time: a firewall, or an overloaded worker'],
    [undefined, 'UND_ERR_CONNECT_TIMEOUT', 'no answer in time: a firewall, or an overloaded worker'],
    [500, undefined, undefined],
    [undefined, 'ECONNRESET', undefined],
  ] as const)('%s, %s', (statusCode, code, hint) => {
    expect(probeHint(statusCode, code)).toBe(hint);
  });
});
