// The Scheduler's P/D verdict: its deciders asked once per request, the verdict given to each
// attempt's decision, and a decider's later answer never mistaken for a reason.
import { describe, expect, it } from 'vitest';
import { decidersFrom } from '../../src/routing/decider-plugins.js';
import { RoutingInput } from '../../src/routing/routing-input.js';
import { Scheduler } from '../../src/routing/scheduler.js';
import { WorkerPool } from '../../src/routing/worker-pool.js';

type W = { url: string };
const pools = () => ({
  prefillWorkers: new WorkerPool<W>([{ url: 'http://p' }]),
  decodeWorkers: new WorkerPool<W>([{ url: 'http://d' }]),
});

describe('Scheduler: the P/D verdict', () => {
  it("the verdict of the scheduler's deciders, given to decide, serves the request on decode alone", async () => {
    const scheduler = new Scheduler<W, W>({
      ...pools(),
      decider: decidersFrom([{ name: 'short-prompt', params: { belowChars: 8 } }]),
    });
    const short = new RoutingInput({ prompt: 'Hi' });
    const long = new RoutingInput({ prompt: 'A prompt long enough to disaggregate' });
    expect(scheduler.decides).toBe(true);
    expect(scheduler.decide(short, {}, await scheduler.verdict(short))).toMatchObject({
      strategy: 'aggregated',
      reason: 'short-prompt',
    });
    expect(scheduler.decide(long, {}, await scheduler.verdict(long)).strategy).toBe('disaggregated');
  });

  it('without deciders the verdict is undefined: every request disaggregated', async () => {
    const scheduler = new Scheduler<W, W>(pools());
    expect(scheduler.decides).toBe(false);
    expect(await scheduler.verdict(new RoutingInput({ prompt: 'Hi' }))).toBeUndefined();
  });

  it("a decider's later answer passed to decide unawaited is refused, naming the call to make", () => {
    const scheduler = new Scheduler<W, W>(pools());
    const input = new RoutingInput({ prompt: 'Hi' });
    expect(() => scheduler.decide(input, {}, Promise.resolve('x') as never)).toThrow(
      /await scheduler\.verdict\(input\) first/,
    );
  });
});
