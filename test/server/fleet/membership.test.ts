import { describe, expect, it, vi } from 'vitest';
import { WorkerPool } from '../../../src/flow/worker-pool.js';
import type { HealthChecker } from '../../../src/server/fleet/health.js';
import { Membership, MembershipError } from '../../../src/server/fleet/membership.js';
import type { ProxyDecodeWorker, ProxyPrefillWorker } from '../../../src/server/options.js';

/** A membership over the given start-up workers, with a health checker that admits as told. */
function setup(
  prefillWorkers: ProxyPrefillWorker[] = [{ url: 'http://10.0.0.1:8100' }],
  decodeWorkers: ProxyDecodeWorker[] = [{ url: 'http://10.0.0.2:8200/' }],
) {
  const prefill = new WorkerPool<ProxyPrefillWorker>(prefillWorkers);
  const decode = new WorkerPool<ProxyDecodeWorker>(decodeWorkers);
  let answers = true;
  const health = {
    admit: vi.fn(async (role: string, worker: { url: string }) => {
      const pool = role === 'prefill' ? prefill : decode;
      if (answers) pool.setAvailable(worker as never, true);
      return answers;
    }),
    lastFailure: vi.fn(() => (answers ? undefined : { reason: 'ECONNREFUSED', hint: 'nothing listens there' })),
    forget: vi.fn(),
    isHeld: vi.fn(() => false),
    circuit: vi.fn((): 'closed' | 'open' | 'half-open' => 'closed'),
  };
  const logs: Array<{ fields: Record<string, unknown>; message: string | undefined }> = [];
  const log = (fields: object, message?: string) => logs.push({ fields: fields as Record<string, unknown>, message });
  const changes: string[] = [];
  const membership = new Membership(
    { prefill, decode },
    health as unknown as HealthChecker,
    { error: log, warn: log, info: log, debug: log },
    (role, change, source) => changes.push(`${role} ${change} ${source}`),
  );
  return {
    membership,
    prefill,
    decode,
    health,
    logs,
    changes,
    refuseProbes: () => {
      answers = false;
    },
  };
}

describe('Membership: names', () => {
  it('start-up workers are named by role and place; a given name is kept; generated names skip taken ones', async () => {
    const { membership, prefill, decode } = setup(
      [{ url: 'http://p0' }, { url: 'http://p1', name: 'big-prefill' }, { url: 'http://p2' }],
      [{ url: 'http://d0', name: 'decode-1' }, { url: 'http://d1' }],
    );
    expect(prefill.workers.map((worker) => membership.nameOf(worker))).toEqual([
      'prefill-0',
      'big-prefill',
      'prefill-1',
    ]);
    expect(decode.workers.map((worker) => membership.nameOf(worker))).toEqual(['decode-1', 'decode-0']);
    const added = await membership.add('decode', { url: 'http://d2' }, 'admin');
    expect(added.name).toBe('decode-2');
    expect(membership.nameOf({ url: 'http://p0' })).toBe('worker');
  });

  it('find: by name first, then by URL with or without its trailing slash, in either pool', () => {
    const { membership, prefill, decode } = setup(
      [{ url: 'http://p0' }],
      [{ url: 'http://d0/' }, { url: 'http://d1', name: 'http://p0' }],
    );
    expect(membership.find('prefill-0')).toEqual({ role: 'prefill', worker: prefill.workers[0] });
    expect(membership.find('http://d0')).toEqual({ role: 'decode', worker: decode.workers[0] });
    expect(membership.find('http://d0///')).toEqual({ role: 'decode', worker: decode.workers[0] });
    // A name that is also another worker's URL names its worker.
    expect(membership.find('http://p0')).toEqual({ role: 'decode', worker: decode.workers[1] });
    expect(membership.find('decode-9')).toBeUndefined();
  });
});

describe('Membership: redact', () => {
  it('a URL is replaced whole by its name, a bare host:port too; other text is left alone', () => {
    const { membership } = setup();
    expect(membership.redact('http://10.0.0.2:8200/v1/completions answered 500 (10.0.0.1:8100 unreachable)')).toBe(
      'decode-0/v1/completions answered 500 (prefill-0 unreachable)',
    );
    expect(membership.redact('Stream reset: nothing to hide')).toBe('Stream reset: nothing to hide');
  });

  it('a longer address is replaced before a shorter one it contains', () => {
    const { membership } = setup([{ url: 'http://h:81' }], [{ url: 'http://h:8100' }]);
    expect(membership.redact('http://h:8100/x and h:81/y')).toBe('decode-0/x and prefill-0/y');
  });

  it('a worker that left keeps its address hidden while requests it served still answer, then is forgotten', async () => {
    const { membership, decode, health } = setup();
    const worker = decode.workers[0] as ProxyDecodeWorker;
    const lease = decode.acquire();
    membership.remove('decode', worker, 'admin');
    expect(membership.redact('http://10.0.0.2:8200 failed')).toBe('decode-0 failed');
    lease.release();
    await vi.waitFor(() => expect(health.forget).toHaveBeenCalledWith(worker));
    expect(membership.redact('http://10.0.0.2:8200 failed')).toBe('http://10.0.0.2:8200 failed');
    expect(membership.nameOf(worker)).toBe('worker');
  });

  it('an address given again to a new worker stays hidden when the old one is forgotten', async () => {
    const { membership, decode, health } = setup();
    const old = decode.workers[0] as ProxyDecodeWorker;
    const lease = decode.acquire();
    membership.remove('decode', old, 'admin');
    await membership.add('decode', { url: 'http://10.0.0.2:8200', name: 'decode-new' }, 'admin');
    lease.release();
    await vi.waitFor(() => expect(health.forget).toHaveBeenCalledWith(old));
    expect(membership.redact('http://10.0.0.2:8200 and 10.0.0.2:8200')).toBe('decode-new and decode-new');
  });

  it('a URL without a host adds no host entry', async () => {
    const { membership } = setup([{ url: 'http://p0' }], [{ url: 'file:///tmp/x' }]);
    expect(membership.redact('file:///tmp/x')).toBe('decode-0');
    expect(membership.redact('')).toBe('');
  });
});

describe('Membership: changes', () => {
  it('add: out of rotation until its probe answers, logged and counted once; the view lists it', async () => {
    const { membership, decode, health, logs, changes } = setup();
    const view = await membership.add('decode', { url: 'http://10.0.0.3:8200' }, 'dns');
    expect(health.admit).toHaveBeenCalledWith('decode', decode.workers[1]);
    expect(view).toStrictEqual({
      role: 'decode',
      name: 'decode-1',
      url: 'http://10.0.0.3:8200',
      state: 'ready',
      in_flight: 0,
      source: 'dns',
    });
    expect(changes).toEqual(['decode added dns']);
    expect(logs).toEqual([
      {
        fields: { role: 'decode', worker: 'decode-1', url: 'http://10.0.0.3:8200', source: 'dns', state: 'ready' },
        message: 'Worker added to the decode pool',
      },
    ]);
  });

  it('add: a worker that does not answer its probe is added out of rotation, and says so', async () => {
    const { membership, prefill, logs, refuseProbes } = setup();
    refuseProbes();
    const view = await membership.add(
      'prefill',
      { url: 'http://p9', bootstrapPort: 8998, bootstrapHost: 'p9' },
      'admin',
    );
    expect(view).toEqual({
      role: 'prefill',
      name: 'prefill-1',
      url: 'http://p9',
      state: 'down',
      in_flight: 0,
      source: 'admin',
      bootstrap_host: 'p9',
      bootstrap_port: 8998,
      reason: 'ECONNREFUSED',
      hint: 'nothing listens there',
    });
    expect(prefill.isAvailable(prefill.workers[1] as ProxyPrefillWorker)).toBe(false);
    expect(logs).toEqual([
      {
        fields: {
          role: 'prefill',
          worker: 'prefill-1',
          url: 'http://p9',
          source: 'admin',
          state: 'down',
          reason: 'ECONNREFUSED',
          hint: 'nothing listens there',
        },
        message: 'Worker added to the prefill pool; out of rotation until it answers a probe',
      },
    ]);
  });

  it('only a worker out of rotation is listed with why its last probe failed', () => {
    const { membership, decode, refuseProbes } = setup();
    // The checker remembers a failed probe until one succeeds: a worker still in rotation (below
    // the failure threshold) or draining may have one, and its listing must not call it down.
    refuseProbes();
    const lease = decode.acquire();
    membership.drain('decode', decode.workers[0] as ProxyDecodeWorker, 'admin');
    expect(membership.list()).toStrictEqual({
      prefill: [
        {
          role: 'prefill',
          name: 'prefill-0',
          url: 'http://10.0.0.1:8100',
          state: 'ready',
          in_flight: 0,
          source: 'config',
        },
      ],
      decode: [
        {
          role: 'decode',
          name: 'decode-0',
          url: 'http://10.0.0.2:8200/',
          state: 'draining',
          in_flight: 1,
          source: 'config',
        },
      ],
    });
    lease.release();
  });

  it('undrain of a start-up worker leaving for good is refused (409), saying to add it again once it has left', async () => {
    const { membership, decode } = setup();
    const worker = decode.workers[0] as ProxyDecodeWorker;
    const lease = decode.acquire();
    membership.drain('decode', worker, 'admin');
    await expect(membership.undrain('decode', worker)).rejects.toMatchObject({
      code: 'DISAGG_WORKER_LEAVING',
      message: expect.stringContaining('add it again with POST /admin/workers once it has left'),
    });
    lease.release();
  });

  it('a worker out of rotation by an open circuit (its probes passing) is listed with why and how it comes back', () => {
    const { membership, decode, health } = setup();
    const worker = decode.workers[0] as ProxyDecodeWorker;
    decode.setAvailable(worker, false);
    health.circuit.mockReturnValue('open');
    expect(membership.view('decode', worker)).toMatchObject({
      state: 'down',
      reason: 'circuit open: requests failed on it in a row',
      hint: expect.stringContaining('--breaker-open-ms'),
    });
  });

  it('a worker removed while its first probe is under way is answered as left, under the name and source it was added with, and not logged as added', async () => {
    const { membership, health, logs } = setup();
    let answer: (inRotation: boolean) => void = () => {};
    health.admit.mockImplementationOnce(
      () =>
        new Promise<boolean>((resolve) => {
          answer = resolve;
        }),
    );
    const adding = membership.add('decode', { url: 'http://10.0.0.3:8200', name: 'decode-new' }, 'admin');
    const found = membership.find('decode-new');
    expect(found?.role).toBe('decode');
    membership.remove('decode', found?.worker as ProxyDecodeWorker, 'admin');
    await vi.waitFor(() => expect(health.forget).toHaveBeenCalledWith(found?.worker));
    answer(false);
    await expect(adding).resolves.toMatchObject({
      name: 'decode-new',
      source: 'admin',
      url: 'http://10.0.0.3:8200',
      state: 'left',
      in_flight: 0,
    });
    expect(logs.map((entry) => entry.message)).toEqual(['Worker removed from the decode pool']);
  });

  it('add refuses a URL already in the pool (saying when it is draining) and a name already taken', async () => {
    const { membership, decode, changes } = setup();
    const refused = await membership.add('decode', { url: 'http://10.0.0.2:8200' }, 'admin').catch((e: unknown) => e);
    expect(MembershipError.is(refused)).toBe(true);
    expect((refused as Error).name).toBe('MembershipError');
    expect(refused).toMatchObject({
      code: 'DISAGG_WORKER_EXISTS',
      message: 'A decode worker with this URL is already in the pool, as decode-0',
    });
    const lease = decode.acquire();
    membership.drain('decode', decode.workers[0] as ProxyDecodeWorker, 'admin');
    await expect(membership.add('decode', { url: 'http://10.0.0.2:8200/' }, 'admin')).rejects.toMatchObject({
      message:
        'A decode worker with this URL is already in the pool, as decode-0 (draining: add it again once it has left)',
    });
    await expect(membership.add('prefill', { url: 'http://other', name: 'decode-0' }, 'admin')).rejects.toMatchObject({
      code: 'DISAGG_WORKER_EXISTS',
      message: 'The name "decode-0" is taken by another worker',
    });
    // The same URL in the other pool is another worker.
    await expect(membership.add('prefill', { url: 'http://10.0.0.2:8200' }, 'admin')).resolves.toMatchObject({
      name: 'prefill-1',
    });
    lease.release();
    expect(changes).toEqual(['decode draining admin', 'prefill added admin']);
  });

  it('drain: draining at once, left when its last request ends (logged and counted then); draining again changes nothing', async () => {
    const { membership, decode, health, logs, changes } = setup();
    const worker = decode.workers[0] as ProxyDecodeWorker;
    const lease = decode.acquire();
    const view = membership.drain('decode', worker, 'kubernetes');
    expect(view).toMatchObject({ state: 'draining', in_flight: 1, source: 'config' });
    expect(logs).toEqual([
      {
        fields: { role: 'decode', worker: 'decode-0', url: 'http://10.0.0.2:8200/', source: 'kubernetes', inFlight: 1 },
        message: 'Worker draining from the decode pool',
      },
    ]);
    expect(membership.drain('decode', worker, 'kubernetes')).toMatchObject({ state: 'draining' });
    expect(changes).toEqual(['decode draining kubernetes']);
    expect(health.forget).not.toHaveBeenCalled();
    lease.release();
    await vi.waitFor(() => expect(changes).toEqual(['decode draining kubernetes', 'decode left kubernetes']));
    expect(health.forget).toHaveBeenCalledWith(worker);
    expect(logs[1]).toEqual({
      fields: { role: 'decode', worker: 'decode-0', url: 'http://10.0.0.2:8200/', source: 'kubernetes' },
      message: 'Drained worker left the pool',
    });
    expect(membership.list().decode).toEqual([]);
  });

  it('drain with nothing under way: left at once', async () => {
    const { membership, decode, changes } = setup();
    const view = membership.drain('decode', decode.workers[0] as ProxyDecodeWorker, 'admin');
    expect(view.state).toBe('left');
    await vi.waitFor(() => expect(changes).toEqual(['decode draining admin', 'decode left admin']));
  });

  it('remove: gone at once, counted as removed (not again when its requests end)', async () => {
    const { membership, prefill, health, logs, changes } = setup();
    const worker = prefill.workers[0] as ProxyPrefillWorker;
    const lease = prefill.acquire();
    const view = membership.remove('prefill', worker, 'admin');
    expect(view).toMatchObject({ state: 'left', in_flight: 1, name: 'prefill-0' });
    expect(logs).toEqual([
      {
        fields: { role: 'prefill', worker: 'prefill-0', url: 'http://10.0.0.1:8100', source: 'admin', inFlight: 1 },
        message: 'Worker removed from the prefill pool',
      },
    ]);
    lease.release();
    await vi.waitFor(() => expect(health.forget).toHaveBeenCalledWith(worker));
    expect(changes).toEqual(['prefill removed admin']);
    expect(logs).toHaveLength(1);
  });

  it('removed while draining: it leaves once (forgotten once, counted left once)', async () => {
    const { membership, decode, health, changes } = setup();
    const worker = decode.workers[0] as ProxyDecodeWorker;
    const lease = decode.acquire();
    membership.drain('decode', worker, 'admin');
    membership.remove('decode', worker, 'admin');
    lease.release();
    await vi.waitFor(() => expect(health.forget).toHaveBeenCalledTimes(1));
    await new Promise((resolve) => setImmediate(resolve));
    expect(health.forget).toHaveBeenCalledTimes(1);
    expect(changes).toEqual(['decode draining admin', 'decode removed admin', 'decode left admin']);
  });

  it('a worker that left and came back leaves again when drained again', async () => {
    const { membership, decode, changes } = setup();
    const worker = decode.workers[0] as ProxyDecodeWorker;
    for (let round = 0; round < 2; round++) {
      const lease = decode.acquire();
      membership.drain('decode', worker, 'dns');
      lease.release();
      await vi.waitFor(() => expect(decode.has(worker)).toBe(false));
      await vi.waitFor(() => expect(changes.at(-1)).toBe('decode left dns'));
      if (round === 0) await membership.add('decode', worker, 'dns');
    }
    expect(changes).toEqual([
      'decode draining dns',
      'decode left dns',
      'decode added dns',
      'decode draining dns',
      'decode left dns',
    ]);
  });

  it('a worker added again before it finished leaving stays known under its name, and leaves when drained again', async () => {
    const { membership, decode, health, changes } = setup();
    const worker = decode.workers[0] as ProxyDecodeWorker;
    const lease = decode.acquire();
    membership.remove('decode', worker, 'dns');
    decode.add(worker);
    lease.release();
    await Promise.resolve();
    await new Promise((resolve) => setImmediate(resolve));
    expect(health.forget).not.toHaveBeenCalled();
    expect(membership.nameOf(worker)).toBe('decode-0');
    // Its first leave is over: this drain is a leave of its own, not one already under way.
    membership.drain('decode', worker, 'dns');
    await vi.waitFor(() => expect(health.forget).toHaveBeenCalledWith(worker));
    expect(changes).toEqual(['decode removed dns', 'decode draining dns', 'decode left dns']);
  });

  it('a worker removed, added back and removed again before its requests end leaves without an error once they end', async () => {
    const { membership, decode, health } = setup();
    const worker = decode.workers[0] as ProxyDecodeWorker;
    const lease = decode.acquire();
    membership.remove('decode', worker, 'dns');
    const adding = membership.add('decode', worker, 'dns');
    membership.remove('decode', worker, 'dns');
    await adding;
    lease.release();
    // Both leaves end; an error thrown by the second would be an unhandled rejection.
    await vi.waitFor(() => expect(health.forget).toHaveBeenCalledTimes(2));
    await new Promise((resolve) => setImmediate(resolve));
    expect(decode.has(worker)).toBe(false);
    expect(membership.nameOf(worker)).toBe('worker');
  });
});

describe('Membership: discovery', () => {
  it("a source sees and changes only its own workers: current lists them with their draining state; drain by URL leaves others' alone", async () => {
    const { membership, decode } = setup([{ url: 'http://p0' }], [{ url: 'http://10.0.0.9:8200' }]);
    const check = vi.fn((_role: string, worker: { url: string }) => ({ url: worker.url }));
    const target = membership.targetFor('dns', check);
    await target.add('decode', { url: 'http://10.0.0.5:8200' });
    await target.add('decode', { url: 'http://10.0.0.6:8200' });
    expect(check).toHaveBeenCalledWith('decode', { url: 'http://10.0.0.5:8200' });
    const lease = decode.acquire([decode.workers[0] as ProxyDecodeWorker, decode.workers[2] as ProxyDecodeWorker]);
    target.drain('decode', 'http://nowhere');
    expect(target.current('decode').map((worker) => worker.draining)).toEqual([false, false]);
    target.drain('decode', 'http://10.0.0.5:8200');
    expect(target.current('decode')).toEqual([
      { url: 'http://10.0.0.5:8200', draining: true },
      { url: 'http://10.0.0.6:8200', draining: false },
    ]);
    // The start-up worker is the config's, not the source's: not drained by it.
    target.drain('decode', 'http://10.0.0.9:8200');
    target.drain('decode', 'http://nowhere');
    expect(decode.stateOf(decode.workers[0] as ProxyDecodeWorker)).toBe('ready');
    expect(target.current('decode')).toEqual([
      { url: 'http://10.0.0.5:8200', draining: true },
      { url: 'http://10.0.0.6:8200', draining: false },
    ]);
    expect(target.current('prefill')).toEqual([]);
    expect(membership.workersFrom('decode', 'config').map((worker) => worker.url)).toEqual(['http://10.0.0.9:8200']);
    lease.release();
  });

  it("a found worker keeps its pod's name; a pod re-created under that name while the old one drains joins at once as <name>-2", async () => {
    const { membership, decode } = setup([{ url: 'http://p0' }], []);
    const check = (_role: string, worker: { url: string; name?: string }) => ({ ...worker });
    const target = membership.targetFor('kubernetes', check);
    await target.add('decode', { url: 'http://10.0.0.5:8200', name: 'decode-a' });
    const lease = decode.acquire([decode.workers[0] as ProxyDecodeWorker]);
    target.drain('decode', 'http://10.0.0.5:8200');
    await target.add('decode', { url: 'http://10.0.0.7:8200', name: 'decode-a' });
    expect(decode.workers.map((worker) => [worker.url, membership.nameOf(worker), decode.stateOf(worker)])).toEqual([
      ['http://10.0.0.5:8200', 'decode-a', 'draining'],
      ['http://10.0.0.7:8200', 'decode-a-2', 'ready'],
    ]);
    lease.release();
  });

  it('a pod re-created again while both of its earlier copies drain joins as <name>-3', async () => {
    const { membership, decode } = setup([{ url: 'http://p0' }], []);
    const check = (_role: string, worker: { url: string; name?: string }) => ({ ...worker });
    const target = membership.targetFor('kubernetes', check);
    const leases = [];
    for (const url of ['http://10.0.0.5:8200', 'http://10.0.0.7:8200']) {
      await target.add('decode', { url, name: 'decode-a' });
      leases.push(decode.acquire());
      target.drain('decode', url);
    }
    await target.add('decode', { url: 'http://10.0.0.8:8200', name: 'decode-a' });
    expect(decode.workers.map((worker) => [membership.nameOf(worker), decode.stateOf(worker)])).toEqual([
      ['decode-a', 'draining'],
      ['decode-a-2', 'draining'],
      ['decode-a-3', 'ready'],
    ]);
    for (const lease of leases) lease.release();
  });
});

describe('names are one worker each', () => {
  it('a name given is kept whatever the order: an unnamed worker before one named prefill-0 gets another name', () => {
    const unnamed = { url: 'http://10.0.0.1:8100' };
    const named = { url: 'http://10.0.0.3:8100', name: 'prefill-0' };
    const { membership } = setup([unnamed, named]);
    expect(membership.nameOf(named)).toBe('prefill-0');
    expect(membership.nameOf(unnamed)).toBe('prefill-1');
    expect(membership.find('prefill-0')?.worker).toBe(named);
  });
});
