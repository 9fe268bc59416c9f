import { afterEach, describe, expect, it } from 'vitest';
import type { FakeKvEvent, FakeKvPublisher } from '../../src/fakes/fake-kv-publisher.js';
import { FakeSimulation } from '../../src/fakes/fake-simulation.js';
import { KvLedger } from '../../src/fakes/kv-ledger.js';
import { KvBlockIndex } from '../../src/kv/block-index.js';
import { loadBlockKeys } from '../../src/kv/block-keys.js';
import { decodeKvEventBatch } from '../../src/kv/kv-events.js';
import { transferMs } from '../../src/simulation/profile-timing.js';
import type { EngineProfile } from '../../src/simulation/profile-types.js';
import { msgpack } from '../../src/util/msgpack.js';
import { ARITHMETIC_PROFILE } from '../simulation/sim-fixtures.js';

// Virtual time runs a million times faster than the wall: a job is over in a few wall ms, and
// nothing here reads the wall.
const SPEEDUP = 1_000_000;
const open: FakeSimulation[] = [];
afterEach(() => {
  for (const simulation of open.splice(0)) simulation.close();
});

/** A publisher that keeps each batch as a SUB socket would decode it (map encoding). */
function recordingPublisher() {
  const batches: FakeKvEvent[][] = [];
  const publisher = {
    publish: async (events: readonly FakeKvEvent[]) => {
      batches.push([...events]);
      return BigInt(batches.length - 1);
    },
  } as unknown as FakeKvPublisher;
  const decoded = () =>
    batches.map((events) => decodeKvEventBatch(msgpack().encoder.encode([0, events, 0]) as Uint8Array).events);
  return { publisher, batches, decoded };
}

function simulation(profile: EngineProfile = ARITHMETIC_PROFILE, publisher?: FakeKvPublisher) {
  const made = new FakeSimulation({ profile, speedup: SPEEDUP }, publisher);
  open.push(made);
  return made;
}

const ids = (n: number, from: number) => Array.from({ length: n }, (_, i) => from + i);
/** Lets the batch a step's events were gathered into be published. */
const settled = () => new Promise((resolve) => setImmediate(resolve));

describe('a fake worker’s simulated engine publishes what its cache holds', () => {
  it('each whole 512-token block of a computed prompt is stored with its tokens and its parent; a router’s index fed them holds the whole blocks', async () => {
    const { publisher, batches, decoded } = recordingPublisher();
    const sim = simulation(ARITHMETIC_PROFILE, publisher);
    const prompt = ids(1100, 1);
    await sim.generate(sim.prompt(prompt), 2, 'whole').finished;
    await settled();
    const stored = batches.flat();
    // Two whole blocks; the last 76 tokens are no block a router can key.
    expect(stored).toEqual([
      { type: 'BlockStored', block_hashes: [1], parent_block_hash: null, token_ids: ids(512, 1), block_size: 512 },
      { type: 'BlockStored', block_hashes: [2], parent_block_hash: 1, token_ids: ids(512, 513), block_size: 512 },
    ]);
    const index = new KvBlockIndex(await loadBlockKeys());
    for (const event of decoded().flat()) index.apply('w', event);
    expect(index.overlap(prompt, ['w']).get('w')).toBe(1024);
    expect(index.overlap([...ids(512, 1), ...ids(512, 9000)], ['w']).get('w')).toBe(512);
  });

  it('a block evicted for another prompt is published removed under the handle it was stored with, and the index forgets it', async () => {
    const { publisher, batches, decoded } = recordingPublisher();
    // Room for one prompt of 1,300 tokens (82 blocks of 16) and little more.
    const sim = simulation({ ...ARITHMETIC_PROFILE, kvCacheTokens: 1536 }, publisher);
    const first = ids(1300, 1);
    const second = ids(1300, 50_000);
    await sim.generate(sim.prompt(first), 2, 'whole').finished;
    await sim.generate(sim.prompt(second), 2, 'whole').finished;
    await settled();
    const removed = batches.flat().filter((event) => event.type === 'BlockRemoved');
    expect(removed.flatMap((event) => (event.type === 'BlockRemoved' ? event.block_hashes : []))).toEqual([2, 1]);
    const index = new KvBlockIndex(await loadBlockKeys());
    for (const event of decoded().flat()) index.apply('w', event);
    expect(index.overlap(first, ['w']).get('w')).toBe(0);
    expect(index.overlap(second, ['w']).get('w')).toBe(1024);
    // What the index holds is what the engine's cache holds: its whole blocks.
    const whole = [...sim.engine.kv.nodes()].filter((node) => node.tier === 'gpu' && node.tokens === 512);
    expect(index.blocks('w')).toBe(whole.length);
  });
});

describe('a simulated prefill holds its KV until the decode side has it', () => {
  /** A prefill computed and committed for a decode side, its caller answered. */
  async function committed(profile: EngineProfile = ARITHMETIC_PROFILE) {
    const sim = simulation(profile);
    const ledger = new KvLedger({ onChange: (handoff, owner) => sim.handoff(handoff, owner) });
    const owner = {};
    const cached = await sim.prefill(owner, sim.prompt(ids(2048, 1)));
    ledger.commit('k', 'r', owner);
    sim.answered(owner);
    return { sim, ledger, owner, cached };
  }

  it('claimed, its blocks go the profile’s transfer time of the prompt later, not before', async () => {
    const { sim, ledger, cached } = await committed();
    expect(cached).toBe(0);
    expect(sim.engine.jobs).toBe(1);
    const seen: Array<[string, number]> = [];
    sim.clock.run(() => {
      ledger.claim('k');
      const at = sim.clock.now + transferMs(ARITHMETIC_PROFILE, 2048);
      sim.clock.at(at * (1 - 1e-9), () => seen.push(['just before', sim.engine.jobs]));
      sim.clock.at(at, () => seen.push(['at', sim.engine.jobs]));
    });
    await new Promise<void>((resolve) => sim.clock.after(10_000, resolve));
    expect(seen).toEqual([
      ['just before', 1],
      ['at', 0],
    ]);
  });

  it.each(['strand', 'release'] as const)('freed unclaimed (%s), its blocks go at once', async (how) => {
    const { sim, ledger } = await committed();
    const seen: number[] = [];
    sim.clock.run(() => {
      ledger[how]('k');
      sim.clock.at(sim.clock.now, () => seen.push(sim.engine.jobs));
    });
    await new Promise<void>((resolve) => sim.clock.after(1, resolve));
    expect(seen).toEqual([0]);
  });

  it('not yet answered, its blocks stay held though the handoff was claimed', async () => {
    const sim = simulation();
    const ledger = new KvLedger({ onChange: (handoff, owner) => sim.handoff(handoff, owner) });
    const owner = {};
    await sim.prefill(owner, sim.prompt(ids(600, 1)));
    ledger.commit('k', 'r', owner);
    ledger.claim('k');
    await new Promise<void>((resolve) => sim.clock.after(10_000, resolve));
    expect(sim.engine.jobs).toBe(1);
    sim.answered(owner);
    await new Promise<void>((resolve) => sim.clock.after(10_000, resolve));
    expect(sim.engine.jobs).toBe(0);
  });

  it('a prefill whose caller left before its job was on the engine lets its blocks go once computed', async () => {
    const sim = simulation();
    const owner = {};
    sim.answered(owner);
    await sim.prefill(owner, sim.prompt(ids(600, 1)));
    await new Promise<void>((resolve) => sim.clock.after(1, resolve));
    expect(sim.engine.jobs).toBe(0);
  });

  it('a repeated prompt is found in the prefill’s cache once its first computation let it go', async () => {
    const { sim, ledger } = await committed();
    ledger.claim('k');
    await new Promise<void>((resolve) => sim.clock.after(10_000, resolve));
    expect(await sim.prefill({}, sim.prompt([...ids(2048, 1), ...ids(100, 7000)]))).toBe(2048);
  });
});

describe('a simulated engine refuses what it could never run', () => {
  it('a prompt as long as its context is refused rather than left first in line for ever', () => {
    const sim = simulation({ ...ARITHMETIC_PROFILE, kvCacheTokens: 1024 });
    expect(() => sim.generate(sim.prompt(ids(1024, 1)), 1, 'whole')).toThrow(RangeError);
    expect(sim.engine.jobs).toBe(0);
  });
});
