// One contract for every routing plugin, as hono runs one case file against each of its
// routers: every entry of SCORERS, FILTERS, PICKERS and DECIDERS, the built-ins and one of each
// registered as a router author would, made by its factory with its defaults and the same
// services, must keep the promises the scheduler counts on.
import { describe, expect, it } from 'vitest';
import type { EngineLoad } from '../../src/protocol/engines/load-metrics.js';
import { DECIDERS, type DeciderServices } from '../../src/routing/decider-plugins.js';
import { FILTERS } from '../../src/routing/filter-plugins.js';
import type { KvIndexView } from '../../src/routing/kv-prefix.js';
import { PICKERS } from '../../src/routing/picker-plugins.js';
import { type AnyParam, type RoutingPlugin, withDefaults } from '../../src/routing/plugin-params.js';
import {
  registerDecider,
  registerFilter,
  registerPicker,
  registerScorer,
} from '../../src/routing/plugin-registration.js';
import { SCORERS } from '../../src/routing/plugins.js';
import { RoutingInput } from '../../src/routing/routing-input.js';
import type { LoadView } from '../../src/routing/routing-policy.js';
import { ROUTING_DATA } from '../../src/routing/services.js';
import { LatencyPredictor } from '../../src/routing/slo/latency-predictor.js';

type W = { url: string };
const a: W = { url: 'http://a:8000' };
const b: W = { url: 'http://b:8001' };
const c: W = { url: 'http://c:8002' };
const workers = [a, b, c];
const load: LoadView<W> = { inFlight: (worker) => workers.indexOf(worker) };

// One plugin of each kind registered as a router author would, so that the contract covers
// what registration lets in, not only what the project wrote.
registerScorer({
  name: 'contract-successes',
  help: 'the workers with the most successful legs (it learns, so it must forget)',
  params: [],
  consumes: {},
  create: <V extends { url: string }>() => {
    const successes = new Map<V, number>();
    return {
      name: 'contract-successes',
      score: (candidates: readonly V[]) => {
        const most = Math.max(1, ...candidates.map((worker) => successes.get(worker) ?? 0));
        return candidates.map((worker) => (successes.get(worker) ?? 0) / most);
      },
      completed: (worker: V, _input: RoutingInput | undefined, outcome: 'success' | 'failure') => {
        if (outcome === 'success') successes.set(worker, (successes.get(worker) ?? 0) + 1);
      },
      forget: (worker: V) => successes.delete(worker),
    };
  },
});
registerFilter({
  name: 'contract-even-port',
  help: 'keeps the workers on an even port',
  params: [],
  consumes: {},
  create: () => ({
    name: 'contract-even-port',
    filter: (candidates) => candidates.filter((worker) => Number(new URL(worker.url).port) % 2 === 0),
  }),
});
registerPicker({
  name: 'contract-lottery',
  help: 'a candidate at random',
  params: [],
  consumes: {},
  create: (_params, services) => ({
    name: 'contract-lottery',
    pick: (candidates) => candidates[Math.floor((services.random ?? Math.random)() * candidates.length)] as never,
  }),
});
registerDecider({
  name: 'contract-idle-decode',
  help: 'a decode worker whose engine reports an empty queue, looked up later',
  params: [],
  consumes: { 'engine-load': 'required' },
  create: (_params, services) => async () =>
    services.decodeWorkers?.().some((worker) => services.engineLoad?.(worker)?.waiting === 0)
      ? 'idle-decode'
      : undefined,
});

/** A seeded source of numbers in [0, 1) (mulberry32): the same seed, the same numbers. */
function seeded(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const LOADS = new Map<W, EngineLoad>([
  [a, { waiting: 3, running: 2, kvUsage: 0.7, lora: { max: 2, running: ['adapter-1'], waiting: [] } }],
  [b, { waiting: 0, running: 1, kvUsage: 0.2, lora: { max: 2, running: [], waiting: [] } }],
]);

/** A KV index that says `a` holds half of every prompt's tokens, and nothing else. */
const INDEX: KvIndexView<W> = {
  scopeOf: () => undefined,
  overlap: (tokens) => ({ get: (worker) => (worker === a ? Math.floor(tokens.length / 2) : 0) }),
  expect: () => {},
};

/** A latency predictor that has learned a TTFT and an inter-token time for `a` and `b` (not `c`). */
function latency(): LatencyPredictor<W> {
  const predictor = new LatencyPredictor<W>({ kvIndex: () => INDEX, engineLoad: (worker) => LOADS.get(worker) });
  for (const [worker, ms] of [
    [a, 300],
    [b, 80],
  ] as const) {
    for (const role of ['prefill', 'decode'] as const) {
      const features = predictor.features(worker, new RoutingInput({ prompt: [1, 2, 3, 4] }), role, load);
      for (let i = 0; i < 10; i++) {
        predictor.learnTtft(worker, features, ms);
        predictor.learnItl(worker, features, ms / 10);
      }
    }
  }
  return predictor;
}

/** Everything a plugin may read, each source the same for the same seed. */
function services(seed: number): DeciderServices<W> {
  return {
    latency: latency(),
    kvIndex: () => INDEX,
    engineLoad: (worker) => LOADS.get(worker),
    random: seeded(seed),
    prefillWorkers: () => workers,
    decodeWorkers: () => workers,
    decodeCachedShare: (input) => (input.promptText.length > 20 ? 0.9 : 0.1),
  };
}

/** The requests a contract is checked on, fresh each time (an input remembers what was routed). */
function inputs(): RoutingInput[] {
  return [
    new RoutingInput({ prompt: 'You are a helpful assistant. Where is Paris?' }, undefined, [1, 2, 3, 4, 5, 6, 7, 8]),
    // One with service levels, for the SLO plugins.
    Object.assign(new RoutingInput({ prompt: 'Say hello.' }), { serviceLevels: { ttftMs: 200, itlMs: 20 } }),
    new RoutingInput({ model: 'adapter-1', messages: [{ role: 'user', content: 'Hi' }] }),
    new RoutingInput({ prompt: '' }),
    new RoutingInput({ prompt: [11, 12, 13, 14] }),
  ];
}

const named = <P extends RoutingPlugin<AnyParam>>(plugins: readonly P[]) =>
  plugins.map((plugin) => [plugin.name, plugin] as const);

describe('every plugin declares itself as the settings read it', () => {
  const all = [...SCORERS, ...FILTERS, ...PICKERS, ...DECIDERS];
  it.each(named(all))('%s: its defaults are valid and it consumes only kinds a router feeds', (_name, plugin) => {
    for (const param of plugin.params) {
      expect((param.valid as (value: unknown) => boolean)(param.default), param.name).toBe(true);
    }
    const kinds: readonly string[] = DECIDERS.includes(plugin as never)
      ? [...ROUTING_DATA, 'decode-caches']
      : ROUTING_DATA;
    for (const [kind, need] of Object.entries(plugin.consumes)) {
      expect(kinds, kind).toContain(kind);
      expect(['required', 'optional']).toContain(need);
    }
  });

  it('the registries hold their built-ins and the plugins registered here, each name once per registry', () => {
    for (const [registry, registered] of [
      [SCORERS, 'contract-successes'],
      [FILTERS, 'contract-even-port'],
      [PICKERS, 'contract-lottery'],
      [DECIDERS, 'contract-idle-decode'],
    ] as const) {
      const names = registry.map((plugin: RoutingPlugin<AnyParam>) => plugin.name);
      expect(names).toContain(registered);
      expect(new Set(names).size).toBe(names.length);
    }
  });
});

describe.each(named(SCORERS))('scorer %s', (_name, plugin) => {
  const make = (seed: number) => plugin.create<W>(withDefaults(plugin), services(seed));
  /** A scorer that has seen every request routed to `worker` and served well there. */
  const trained = (seed: number, worker: W) => {
    const scorer = make(seed);
    for (const input of inputs()) {
      scorer.routed?.(worker, input);
      scorer.completed?.(worker, input, 'success');
    }
    return scorer;
  };
  const scores = (scorer: ReturnType<typeof make>) => inputs().map((input) => scorer.score(workers, load, input));

  it('scores each candidate from 0 to 1, one score per candidate in their order', () => {
    for (const scorer of [make(1), trained(1, a)]) {
      for (const input of [...inputs(), undefined]) {
        const each = scorer.score(workers, load, input);
        expect(each).toHaveLength(workers.length);
        for (const score of each) expect(score >= 0 && score <= 1, String(score)).toBe(true);
      }
    }
  });

  it('is deterministic under a seed: the same requests, the same scores', () => {
    expect(scores(trained(7, b))).toEqual(scores(trained(7, b)));
  });

  it('forget drops the worker: what it learnt of it no longer counts', () => {
    const scorer = trained(3, a);
    scorer.forget?.(a);
    expect(scores(scorer)).toEqual(scores(make(3)));
  });
});

describe.each(named(FILTERS))('filter %s', (_name, plugin) => {
  const make = (seed: number) => plugin.create<W>(withDefaults(plugin), services(seed));

  it('keeps some of the candidates, in their order, and adds none', () => {
    for (const input of [...inputs(), undefined]) {
      const kept = make(1).filter(workers, load, input);
      expect(workers.filter((worker) => kept.includes(worker))).toEqual(kept);
    }
  });

  it('is deterministic under a seed', () => {
    const run = (seed: number) => {
      const filter = make(seed);
      return inputs().map((input) => filter.filter(workers, load, input));
    };
    expect(run(7)).toEqual(run(7));
  });
});

describe.each(named(PICKERS))('picker %s', (_name, plugin) => {
  const make = (seed: number) => plugin.create<W>(withDefaults(plugin), services(seed));
  const totals = [
    [0.2, 0.9, 0.5],
    [0, 0, 0],
    [1, 1, 1],
    [3, 0.1, 2],
  ];

  it('picks one of the candidates', () => {
    const picker = make(1);
    for (const scores of totals) expect(workers).toContain(picker.pick(workers, scores, load));
    expect(picker.pick([b], [0.4], load)).toBe(b);
  });

  it('is deterministic under a seed: the same totals, the same picks', () => {
    const run = (seed: number) => {
      const picker = make(seed);
      return Array.from({ length: 5 }, () => totals.map((scores) => picker.pick(workers, scores, load)));
    };
    expect(run(7)).toEqual(run(7));
  });
});

describe.each(named(DECIDERS))('decider %s', (_name, plugin) => {
  const make = (seed: number) => plugin.create<W>(withDefaults(plugin), services(seed));
  const verdicts = (seed: number) => {
    const decider = make(seed);
    return Promise.all(inputs().map(async (input) => decider(input)));
  };

  it('answers a reason (a non-empty string) or undefined, at once or later', async () => {
    for (const verdict of await verdicts(1)) {
      expect(verdict === undefined || (typeof verdict === 'string' && verdict !== ''), String(verdict)).toBe(true);
    }
  });

  it('is deterministic under a seed: the same requests, the same verdicts', async () => {
    expect(await verdicts(7)).toEqual(await verdicts(7));
  });

  it('says nothing (undefined) where what it reads is not there: no decode workers, no caches, no load', async () => {
    const decider = plugin.create<W>(withDefaults(plugin), { decodeWorkers: () => [] });
    const answers = await Promise.all(inputs().map(async (input) => decider(input)));
    // short-prompt reads the request alone: an empty prompt is short with or without workers.
    if (plugin.name === 'short-prompt') expect(answers.filter((each) => each !== undefined)).not.toHaveLength(0);
    else expect(answers).toEqual(inputs().map(() => undefined));
  });
});
