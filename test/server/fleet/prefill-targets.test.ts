import { describe, expect, it } from 'vitest';
import { RoutingInput } from '../../../src/routing/routing-input.js';
import { Scheduler } from '../../../src/routing/scheduler.js';
import { WorkerPool } from '../../../src/routing/worker-pool.js';
import type { ModelPool } from '../../../src/server/fleet/pool-set.js';
import { NO_PREFILL_HEADER, PrefillTargetError, PrefillTargets } from '../../../src/server/fleet/prefill-targets.js';
import type { ProxyDecodeWorker, ProxyPrefillWorker } from '../../../src/server/proxy.js';
import { Networks } from '../../../src/util/networks.js';

function localPool(prefill: ProxyPrefillWorker[] = []): ModelPool {
  const prefillPool = new WorkerPool(prefill);
  const decode = new WorkerPool<ProxyDecodeWorker>([{ url: 'http://127.0.0.1:8200' }]);
  return {
    model: undefined,
    engine: 'vllm',
    connector: {} as ModelPool['connector'],
    prefill: prefillPool,
    decode,
    scheduler: new Scheduler({ prefillWorkers: prefillPool, decodeWorkers: decode }),
  };
}

const targets = (allow: string[], engine: 'vllm' | 'sglang' = 'vllm') =>
  new PrefillTargets({ allow, engine, bootstrapPort: 8998, maxRetries: 2 });
const named = (value: string) => ({ 'x-prefiller-host-port': value });

describe('the prefill targets a sidecar takes from x-prefiller-host-port', () => {
  it('calls a named worker inside the allow-list, by address, named so that a client never sees the address', () => {
    const pool = targets(['10.0.0.0/8']).poolFor(localPool(), named('10.1.2.3:8000'));
    expect(pool.prefill.workers).toEqual([{ url: 'http://10.1.2.3:8000', name: 'prefill-target' }]);
    const decision = pool.scheduler.decide(new RoutingInput({ prompt: 'x' }));
    expect(decision.strategy).toBe('disaggregated');
  });

  it('keeps the header order of a list, the first tried first', () => {
    const pool = targets(['10.0.0.0/8']).poolFor(localPool(), named(' 10.0.0.7:8000 , 10.0.0.8:8000'));
    expect(pool.prefill.workers.map((worker) => worker.url)).toEqual(['http://10.0.0.7:8000', 'http://10.0.0.8:8000']);
    expect(pool.scheduler.decide(new RoutingInput({ prompt: 'x' }))).toMatchObject({
      prefill: { worker: { url: 'http://10.0.0.7:8000' } },
    });
  });

  it('refuses an address outside the allow-list, a host name it was not given, and anything that is not host:port', () => {
    const sidecar = targets(['10.0.0.0/8', 'fd00::/8']);
    for (const value of [
      '169.254.169.254:80',
      '11.0.0.1:8000',
      'metadata.google.internal:80',
      '10.0.0.1',
      '10.0.0.1:0',
      '10.0.0.1:70000',
      'http://10.0.0.1:80',
      'user@10.0.0.1:80',
      '[10.0.0.1]:80',
      '10.0.0.1:80,169.254.169.254:80',
    ]) {
      expect(() => sidecar.poolFor(localPool(), named(value)), value).toThrow(PrefillTargetError);
    }
    expect(sidecar.poolFor(localPool(), named('[fd00::5]:8000')).prefill.workers[0]?.url).toBe('http://[fd00::5]:8000');
  });

  it('takes a prefill worker it was given (or found) by its own record, host names included, without an allow-list', () => {
    const given = { url: 'http://prefill-0.prefill.svc:8000', name: 'prefill-a', bootstrapPort: 9000 };
    const pool = targets([]).poolFor(localPool([given]), named('prefill-0.prefill.svc:8000'));
    expect(pool.prefill.workers).toEqual([given]);
    expect(() => targets([]).poolFor(localPool([given]), named('prefill-0.prefill.svc:8001'))).toThrow(
      PrefillTargetError,
    );
  });

  it("gives an SGLang prefill worker named by address the sidecar's bootstrap port", () => {
    const pool = targets(['10.0.0.0/8'], 'sglang').poolFor(localPool(), named('10.0.0.9:30000'));
    expect(pool.prefill.workers).toEqual([
      { url: 'http://10.0.0.9:30000', name: 'prefill-target', bootstrapPort: 8998 },
    ]);
  });

  it('serves a request without the header on the decode worker alone, saying why', async () => {
    const base = localPool([{ url: 'http://10.0.0.1:8000' }]);
    const pool = targets(['10.0.0.0/8']).poolFor(base, {});
    const input = new RoutingInput({ prompt: 'x' });
    expect(await pool.scheduler.verdict(input)).toBe(NO_PREFILL_HEADER);
    expect(pool.scheduler.decide(input, {}, NO_PREFILL_HEADER).strategy).toBe('aggregated');
    // With the header, the picker decided to disaggregate: the sidecar does not decide again.
    const named = targets(['10.0.0.0/8']).poolFor(base, { 'x-prefiller-host-port': '10.0.0.9:30000' });
    expect(await named.scheduler.verdict(new RoutingInput({ prompt: 'x' }))).toBeUndefined();
    // One such pool per model pool, not one per request.
    expect(targets(['10.0.0.0/8']).poolFor(base, { 'x-prefiller-host-port': '' }).decode).toBe(base.decode);
  });
});

describe('Networks', () => {
  it('holds CIDRs and single addresses of both families, and never a name', () => {
    const networks = new Networks(['10.0.0.0/8', '192.168.1.5', 'fd00::/8']);
    expect(['10.255.0.1', '192.168.1.5', 'fd00::1'].map((a) => networks.has(a))).toEqual([true, true, true]);
    expect(['11.0.0.1', '192.168.1.6', 'fe80::1', 'localhost', ''].map((a) => networks.has(a))).toEqual([
      false,
      false,
      false,
      false,
      false,
    ]);
  });

  it('refuses what is no network, naming it', () => {
    for (const entry of ['10.0.0.0/33', '10.0.0.0/', '10.0.0.0/8/1', 'fd00::/129', 'ten.0.0.0/8', '10.0.0.0/x']) {
      expect(() => new Networks([entry]), entry).toThrow(JSON.stringify(entry));
    }
  });
});
