import { describe, expect, it } from 'vitest';
import { WorkerPool } from '../../src/flow/worker-pool.js';
import { createPolicy, POLICIES, POLICY_NAMES } from '../../src/routing/registry.js';
import { RoutingInput } from '../../src/routing/routing-input.js';
import { SETTINGS } from '../../src/server/options.js';

const idle = { inFlight: () => 0 };
const params = {
  cacheThreshold: 0.5,
  balanceAbsThreshold: 32,
  balanceRelThreshold: 1.1,
  maxTreeChars: 1024,
  prefixWeight: 2,
  speculativeTtlMs: 2000,
};

describe('the routing registry: one entry per policy, and everything else reads it', () => {
  it('every plugin makes a policy of its own name that picks one of the candidates of a pool', () => {
    for (const name of POLICY_NAMES) {
      const policy = createPolicy(name, params, { kvIndex: () => undefined });
      expect(policy.name, name).toBe(name);
      const pool = new WorkerPool([{ url: 'http://w0' }, { url: 'http://w1' }], { selection: policy });
      const lease = pool.acquire(undefined, new RoutingInput({ prompt: 'Hello there' }, 's'));
      expect(pool.workers, name).toContain(lease.worker);
      lease.release('success');
    }
  });

  it('the policy settings take exactly the registry names, and their help lists them', () => {
    for (const key of ['prefillPolicy', 'decodePolicy']) {
      const setting = SETTINGS.find((each) => each.key === key);
      expect(setting?.arg, key).toBe(POLICY_NAMES.join('|'));
      for (const name of POLICY_NAMES) expect(setting?.parse(name)).toBe(name);
    }
  });

  it('a plugin names only routing settings that exist', () => {
    const routing = SETTINGS.filter((each) => each.key.startsWith('routing.')).map((each) => each.key.slice(8));
    for (const plugin of POLICIES) for (const param of plugin.params) expect(routing, plugin.name).toContain(param);
  });

  it("precise-prefix needs the engines' KV events, and weighs the engines' load when the proxy scrapes it", () => {
    expect(() => createPolicy('precise-prefix', params)).toThrow(
      "precise-prefix routes on the engines' KV events: set --kv-events-port",
    );
    const [a, b] = [{ url: 'http://a' }, { url: 'http://b' }];
    const input = new RoutingInput({ prompt: [1, 2, 3] });
    const engineLoad = (worker: { url: string }) =>
      worker === a ? { waiting: 9, running: 1, kvUsage: 0.9 } : { waiting: 0, running: 0, kvUsage: 0 };
    expect(createPolicy('precise-prefix', params, { kvIndex: () => undefined }).select([a, b], idle, input)).toBe(a);
    expect(
      createPolicy('precise-prefix', params, { kvIndex: () => undefined, engineLoad }).select([a, b], idle, input),
    ).toBe(b);
  });

  it('an unknown name is refused with the names there are', () => {
    expect(() => createPolicy('fastest' as never, params)).toThrow(
      `No routing policy is named "fastest": ${POLICY_NAMES.join(', ')}`,
    );
  });
});
