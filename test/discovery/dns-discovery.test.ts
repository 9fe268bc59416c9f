import { describe, expect, it } from 'vitest';
import { DnsDiscovery, type Lookup } from '../../src/discovery/dns-discovery.js';
import { type DiscoveredWorker, type MembershipTarget, reconcile } from '../../src/discovery/worker-set.js';
import { recordingLogger } from '../support/async.js';

/** A pool as a discovery source sees it, with every change written down. */
function standIn(refuse: (url: string) => boolean = () => false) {
  const workers = new Map<string, { draining: boolean }>();
  const changes: string[] = [];
  const target: MembershipTarget = {
    current: (role) => (role === 'decode' ? [...workers].map(([url, { draining }]) => ({ url, draining })) : []),
    add: async (role, worker: DiscoveredWorker) => {
      if (refuse(worker.url)) throw new Error(`refused ${worker.url}`);
      workers.set(worker.url, { draining: false });
      changes.push(`add ${role} ${worker.url}`);
    },
    drain: (role, url) => {
      (workers.get(url) as { draining: boolean }).draining = true;
      changes.push(`drain ${role} ${url}`);
    },
  };
  return { target, workers, changes };
}

/** A resolver whose answer the test sets; `fail` makes the next lookups throw with that code. */
function resolver(initial: string[]) {
  const state = { addresses: initial, fail: undefined as string | undefined, asked: [] as string[] };
  const lookup: Lookup = async (hostname) => {
    state.asked.push(hostname);
    if (state.fail !== undefined) throw Object.assign(new Error(`lookup ${hostname} failed`), { code: state.fail });
    return state.addresses.map((address) => ({ address }));
  };
  return { state, lookup };
}

describe('reconcile', () => {
  it('adds what was found and is missing, drains what is no longer found, leaves the rest', async () => {
    const { target, workers, changes } = standIn();
    workers.set('http://a', { draining: false });
    workers.set('http://b', { draining: false });
    const { logger } = recordingLogger();
    expect(await reconcile(target, 'decode', [{ url: 'http://b' }, { url: 'http://c' }], logger)).toEqual({
      added: 1,
      drained: 1,
    });
    expect(changes).toEqual(['drain decode http://a', 'add decode http://c']);
  });

  it('a draining worker found again is neither drained twice nor added beside itself', async () => {
    const { target, workers, changes } = standIn();
    workers.set('http://a', { draining: true });
    const { logger } = recordingLogger();
    await reconcile(target, 'decode', [{ url: 'http://a' }], logger);
    await reconcile(target, 'decode', [], logger);
    expect(changes).toEqual([]);
  });

  it('an add that fails is logged and does not stop the others', async () => {
    const { target, changes } = standIn((url) => url === 'http://bad');
    const { logger, records } = recordingLogger();
    expect(await reconcile(target, 'decode', [{ url: 'http://bad' }, { url: 'http://good' }], logger)).toEqual({
      added: 1,
      drained: 0,
    });
    expect(changes).toEqual(['add decode http://good']);
    expect(records[0]).toMatchObject({ level: 'warn', fields: { url: 'http://bad' } });
  });
});

describe('DnsDiscovery', () => {
  it('each address of the name is a worker on the URL port and path; IPv6 in brackets', async () => {
    const { target, workers } = standIn();
    const { state, lookup } = resolver(['10.0.0.2', 'fd00::7', '10.0.0.2']);
    const { logger } = recordingLogger();
    const discovery = new DnsDiscovery({
      role: 'decode',
      url: 'http://decode-headless.llm.svc:8200/',
      target,
      logger,
      lookup,
    });
    await discovery.start();
    discovery.stop();
    expect(state.asked).toEqual(['decode-headless.llm.svc']);
    expect([...workers.keys()]).toEqual(['http://10.0.0.2:8200', 'http://[fd00::7]:8200']);
  });

  it('addresses that come and go change the pool round by round; gone ones drain', async () => {
    const { target, workers, changes } = standIn();
    const { state, lookup } = resolver(['10.0.0.1', '10.0.0.2']);
    const { logger, records } = recordingLogger();
    const discovery = new DnsDiscovery({ role: 'decode', url: 'https://d.example:443', target, logger, lookup });
    await discovery.refresh();
    state.addresses = ['10.0.0.2', '10.0.0.3'];
    await discovery.refresh();
    expect(changes).toEqual([
      'add decode https://10.0.0.1',
      'add decode https://10.0.0.2',
      'drain decode https://10.0.0.1',
      'add decode https://10.0.0.3',
    ]);
    expect(workers.get('https://10.0.0.1')).toEqual({ draining: true });
    expect(records.at(-1)).toMatchObject({ level: 'info', fields: { added: 1, drained: 1, addresses: 2 } });
  });

  it('a resolver failure leaves the pool as it is; a name without addresses drains them all', async () => {
    const { target, changes } = standIn();
    const { state, lookup } = resolver(['10.0.0.1']);
    const { logger, records } = recordingLogger();
    const discovery = new DnsDiscovery({ role: 'decode', url: 'http://d:80', target, logger, lookup });
    await discovery.refresh();
    state.fail = 'EAI_AGAIN';
    await discovery.refresh();
    expect(changes).toEqual(['add decode http://10.0.0.1']);
    expect(records.at(-1)).toMatchObject({ level: 'warn', message: expect.stringContaining('left as it is') });
    state.fail = 'ENOTFOUND';
    await discovery.refresh();
    expect(changes).toEqual(['add decode http://10.0.0.1', 'drain decode http://10.0.0.1']);
    expect(records.map((record) => record.message)).toContain('DNS discovery found no address: its workers drain');
  });

  it('rounds do not overlap: a refresh while one is under way joins it', async () => {
    const { target } = standIn();
    let release = (): void => {};
    let lookups = 0;
    const lookup: Lookup = () => {
      lookups += 1;
      return new Promise((resolve) => {
        release = () => resolve([{ address: '10.0.0.1' }]);
      });
    };
    const { logger } = recordingLogger();
    const discovery = new DnsDiscovery({ role: 'decode', url: 'http://d:80', target, logger, lookup });
    const first = discovery.refresh();
    const second = discovery.refresh();
    expect(second).toBe(first);
    release();
    await first;
    expect(lookups).toBe(1);
  });

  it('after stop(), a round under way changes nothing', async () => {
    const { target, changes } = standIn();
    let release = (): void => {};
    const lookup: Lookup = () =>
      new Promise((resolve) => {
        release = () => resolve([{ address: '10.0.0.1' }]);
      });
    const { logger } = recordingLogger();
    const discovery = new DnsDiscovery({ role: 'decode', url: 'http://d:80', target, logger, lookup });
    const round = discovery.refresh();
    discovery.stop();
    release();
    await round;
    expect(changes).toEqual([]);
  });
});
