import { afterEach, describe, expect, it } from 'vitest';
import { type FakeKvEvent, FakeKvPublisher } from '../../src/fakes/fake-kv-publisher.js';
import type { KvEventBatch } from '../../src/kv/kv-events.js';
import { KvEventSubscriber, type KvEventSubscriberOptions } from '../../src/kv/kv-subscriber.js';
import { recordingLogger } from '../support/async.js';

const open: Array<{ close(): unknown }> = [];
afterEach(async () => {
  for (const each of open.splice(0)) await each.close();
});

const store = (hash: bigint, tokens: number[]): FakeKvEvent => ({
  type: 'BlockStored',
  block_hashes: [hash],
  parent_block_hash: null,
  token_ids: tokens,
  block_size: tokens.length,
});

/** A subscriber that records what it applies, and lets a test wait for the nth batch. */
function follow(publisher: FakeKvPublisher, extra: Partial<KvEventSubscriberOptions> = {}) {
  const seen: Array<{ seq: bigint; batch: KvEventBatch }> = [];
  const resets: string[] = [];
  const trust: boolean[] = [];
  const waiters: Array<{ n: number; resolve: () => void }> = [];
  const trustWaiters: Array<() => void> = [];
  const subscriber = new KvEventSubscriber({
    endpoint: publisher.endpoint,
    replayEndpoint: publisher.replayEndpoint,
    onBatch: (batch, seq) => {
      seen.push({ seq, batch });
      for (const waiter of waiters.filter((w) => seen.length >= w.n)) {
        waiters.splice(waiters.indexOf(waiter), 1);
        waiter.resolve();
      }
    },
    onReset: (reason) => resets.push(reason),
    onTrust: (trusted) => {
      trust.push(trusted);
      if (trusted) for (const wake of trustWaiters.splice(0)) wake();
    },
    logger: recordingLogger().logger,
    ...extra,
  });
  open.push(subscriber);
  const batches = (n: number) =>
    seen.length >= n ? Promise.resolve() : new Promise<void>((resolve) => waiters.push({ n, resolve }));
  /** Resolves at the next time the view is trusted again (a replay is over). */
  const retrusted = () => new Promise<void>((resolve) => trustWaiters.push(resolve));
  return { subscriber, seen, resets, trust, batches, retrusted };
}

describe("KvEventSubscriber: one engine's events, in order, once", () => {
  it.each(['map', 'array'] as const)(
    '%s encoding: batches published before it joined come by replay, later ones live, each once in order',
    async (encoding) => {
      const publisher = await FakeKvPublisher.start({ encoding });
      open.push(publisher);
      await publisher.publish([store(1n, [1, 2])]);
      await publisher.publish([store(2n, [3, 4])]);
      const { subscriber, seen, batches } = follow(publisher);
      await subscriber.start();
      expect(seen.map((each) => each.seq)).toEqual([0n, 1n]);
      await publisher.subscribed();
      await publisher.publish([{ type: 'BlockRemoved', block_hashes: [1n] }]);
      await batches(3);
      expect(seen.map((each) => each.seq)).toEqual([0n, 1n, 2n]);
      expect(seen[2]?.batch.events).toEqual([{ kind: 'removed', blocks: ['1'], medium: 'GPU', group: 0 }]);
      expect(subscriber.stats.replays.recovered).toBe(1);
    },
  );

  it.each(['topic', 'legacy'] as const)(
    'a message lost on the way is replayed (%s replay form); the view is untrusted meanwhile',
    async (replayForm) => {
      const publisher = await FakeKvPublisher.start({ replayForm });
      open.push(publisher);
      const { subscriber, seen, trust, batches, retrusted } = follow(publisher);
      await subscriber.start();
      await publisher.subscribed();
      await publisher.publish([store(1n, [1])]);
      await batches(1);
      const recovered = retrusted();
      publisher.loseNext();
      await publisher.publish([store(2n, [2])]);
      await publisher.publish([store(3n, [3])]);
      await recovered;
      await batches(3);
      expect(seen.map((each) => each.seq)).toEqual([0n, 1n, 2n]);
      expect(subscriber.stats.gaps).toBe(1);
      expect(subscriber.stats.replays.recovered).toBe(2);
      expect(trust).toEqual([false, true, false, true]);
    },
  );

  it('a sequence that goes back is a restarted engine: the view is reset, then follows the new sequence', async () => {
    const publisher = await FakeKvPublisher.start();
    open.push(publisher);
    const { subscriber, seen, resets, batches } = follow(publisher);
    await subscriber.start();
    await publisher.subscribed();
    await publisher.publish([store(1n, [1])]);
    await publisher.publish([store(2n, [2])]);
    await batches(2);
    publisher.restart();
    await publisher.publish([store(9n, [9])]);
    await batches(3);
    expect(resets).toEqual(['restart']);
    expect(seen.map((each) => each.seq)).toEqual([0n, 1n, 0n]);
  });

  it('without a replay socket, a gap resets the view: what was lost may have removed blocks', async () => {
    const publisher = await FakeKvPublisher.start();
    open.push(publisher);
    const { subscriber, seen, resets, batches } = follow(publisher, { replayEndpoint: undefined });
    await subscriber.start();
    await publisher.subscribed();
    await publisher.publish([store(1n, [1])]);
    publisher.loseNext();
    await publisher.publish([store(2n, [2])]);
    await publisher.publish([store(3n, [3])]);
    await batches(2);
    expect(resets).toEqual(['lost']);
    expect(seen.map((each) => each.seq)).toEqual([0n, 2n]);
  });

  it('close stops it; closing twice is fine', async () => {
    const publisher = await FakeKvPublisher.start();
    open.push(publisher);
    const { subscriber } = follow(publisher);
    await subscriber.start();
    await subscriber.close();
    await subscriber.close();
    expect(subscriber.state).toBe('closed');
  });
});
