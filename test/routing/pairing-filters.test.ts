// The legs picked in order, each seeing the earlier legs' workers (llm-d's cycle state), and the
// same-label filter that pairs a decode worker with its prefill worker by an attribute (a model
// revision), as a library user composes it and as the settings name it.
import { describe, expect, it } from 'vitest';
import { filterPlugin, readFilters } from '../../src/routing/filter-plugins.js';
import { sameLabelFilter } from '../../src/routing/pairing-filters.js';
import { scoredFrom } from '../../src/routing/plugins.js';
import { RoutingInput } from '../../src/routing/routing-input.js';
import { LEG_ORDER, Scheduler } from '../../src/routing/scheduler.js';
import { loadScorer, scoredPolicy } from '../../src/routing/scoring.js';
import { WORKER_ATTRIBUTES } from '../../src/routing/worker-attributes.js';
import { NoWorkerError, WorkerPool } from '../../src/routing/worker-pool.js';

type W = { url: string; attributes?: Record<string, string> };
const revision = (url: string, value: string): W => ({ url, attributes: { [WORKER_ATTRIBUTES.revision]: value } });

/** Two prefill and four decode workers, two of each revision, and a scheduler pairing them by revision. */
function fleet(unpaired: 'any' | 'fail' = 'any') {
  const prefill = new WorkerPool([revision('http://p-old', 'v1'), revision('http://p-new', 'v2')]);
  // The other revision first: a pick by load or in turn would reach it for the first prefill worker.
  const decodeWorkers = [
    revision('http://d-new-0', 'v2'),
    revision('http://d-old-0', 'v1'),
    revision('http://d-new-1', 'v2'),
    revision('http://d-old-1', 'v1'),
  ];
  const decode = new WorkerPool(decodeWorkers, {
    selection: scoredPolicy<W>({
      filters: [sameLabelFilter(WORKER_ATTRIBUTES.revision, unpaired)],
      scorers: [{ scorer: loadScorer(), weight: 1 }],
    }),
  });
  return { prefill, decode, scheduler: new Scheduler({ prefillWorkers: prefill, decodeWorkers: decode }) };
}

const input = () => new RoutingInput({ prompt: 'Hi' });

describe('the legs, picked in order', () => {
  it('prefill is picked before decode, and the decode pick sees the prefill worker in input.picked', () => {
    expect(LEG_ORDER).toEqual(['prefill', 'decode']);
    const { prefill, scheduler } = fleet();
    const routed = input();
    const decision = scheduler.decide(routed);
    expect(decision.strategy).toBe('disaggregated');
    const prefillWorker = decision.strategy === 'disaggregated' ? decision.prefill?.worker : undefined;
    expect(prefill.workers).toContain(prefillWorker);
    expect([...routed.picked]).toEqual([
      ['prefill', prefillWorker],
      ['decode', decision.decode?.worker],
    ]);
  });

  it("a new decision forgets the last one's picks; decodeElsewhere keeps the prefill pick and replaces the decode one", () => {
    const { scheduler } = fleet();
    const routed = input();
    const first = scheduler.decide(routed);
    const firstPrefill = first.strategy === 'disaggregated' ? first.prefill?.worker : undefined;
    const again = scheduler.decodeElsewhere([first.decode?.worker as W], routed);
    expect(routed.picked.get('prefill')).toBe(firstPrefill);
    expect(routed.picked.get('decode')).toBe(again?.worker);
    scheduler.decide(routed, {}, 'short-prompt');
    // Decode alone: no prefill pick to pair with.
    expect([...routed.picked.keys()]).toEqual(['decode']);
  });
});

describe('the same-label filter', () => {
  it("keeps the decode workers of the prefill worker's revision", () => {
    const { scheduler } = fleet();
    for (let i = 0; i < 8; i++) {
      const decision = scheduler.decide(input());
      const prefillWorker = decision.strategy === 'disaggregated' ? decision.prefill?.worker : undefined;
      expect(decision.decode?.worker.attributes).toEqual(prefillWorker?.attributes);
    }
  });

  it('filters nothing for the first leg, nor for an earlier worker without the label', () => {
    const filter = sameLabelFilter<W>();
    const candidates = [revision('http://a', 'v1'), revision('http://b', 'v2')];
    const idle = { inFlight: () => 0 };
    expect(filter.filter(candidates, idle, input())).toBe(candidates);
    const unlabelled = input();
    unlabelled.notePicked('prefill', { url: 'http://p' });
    expect(filter.filter(candidates, idle, unlabelled)).toBe(candidates);
    expect(filter.filter(candidates, idle, undefined)).toBe(candidates);
  });

  it('pairs by any label it is given, a pod label of your own', () => {
    const filter = sameLabelFilter<W>('zone');
    const near = { url: 'http://near', attributes: { zone: 'a' } };
    const far = { url: 'http://far', attributes: { zone: 'b' } };
    const routed = input();
    routed.notePicked('prefill', { url: 'http://p', attributes: { zone: 'b' } });
    expect(filter.filter([near, far], { inFlight: () => 0 }, routed)).toEqual([far]);
  });

  it('with unpaired any (the default), no worker of the revision leaves every decode worker a candidate', () => {
    const { decode, prefill, scheduler } = fleet('any');
    for (const worker of decode.workers) {
      if (worker.attributes?.[WORKER_ATTRIBUTES.revision] === 'v2') decode.setAvailable(worker, false);
    }
    prefill.setAvailable(prefill.workers[0] as W, false);
    const decision = scheduler.decide(input());
    expect(decision.decode?.worker.attributes?.[WORKER_ATTRIBUTES.revision]).toBe('v1');
  });

  it('with unpaired fail, no worker of the revision is a NoWorkerError naming the label, and the prefill lease is given back', () => {
    const { decode, prefill, scheduler } = fleet('fail');
    for (const worker of decode.workers) {
      if (worker.attributes?.[WORKER_ATTRIBUTES.revision] === 'v2') decode.setAvailable(worker, false);
    }
    prefill.setAvailable(prefill.workers[0] as W, false);
    let failure: unknown;
    try {
      scheduler.decide(input());
    } catch (error) {
      failure = error;
    }
    expect(NoWorkerError.is(failure)).toBe(true);
    expect(failure).toMatchObject({
      pool: 'decode',
      message:
        "No decode worker is available: none of its 2 candidates has disagg.ai/revision=v2, as the earlier leg's worker does",
    });
    expect(prefill.requestsInFlight).toBe(0);
  });

  it('the settings name it with its key and unpaired as text, refused when blank or unknown', () => {
    expect(readFilters([{ name: 'same-label', params: { key: 'zone', unpaired: 'fail' } }])).toEqual([
      { name: 'same-label', params: { key: 'zone', unpaired: 'fail' } },
    ]);
    expect(() => readFilters([{ name: 'same-label', params: { key: ' ' } }])).toThrow(
      'has filter same-label with key " ": it must be a label key such as disagg.ai/revision',
    );
    expect(() => readFilters([{ name: 'same-label', params: { unpaired: 'never' } }])).toThrow(
      'has filter same-label with unpaired "never": it must be any or fail',
    );
    expect(() => readFilters([{ name: 'same-label', params: { key: 7 } }])).toThrow(/with key 7: it must be/);
    expect(filterPlugin('same-label').params.map((param) => [param.name, param.default])).toEqual([
      ['key', 'disagg.ai/revision'],
      ['unpaired', 'any'],
    ]);
    // A scored policy from the settings pairs as the function does.
    const policy = scoredFrom<W>([{ name: 'load' }], {}, { filters: [{ name: 'same-label' }] });
    const routed = input();
    routed.notePicked('prefill', revision('http://p', 'v2'));
    const old = revision('http://old', 'v1');
    const paired = revision('http://new', 'v2');
    for (let i = 0; i < 3; i++) expect(policy.select([old, paired], { inFlight: () => 0 }, routed)).toBe(paired);
  });
});
