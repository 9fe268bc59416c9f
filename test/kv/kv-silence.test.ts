import { afterEach, describe, expect, it, vi } from 'vitest';
import { KV_SILENCE_START, KvSilenceWatch, nextKvSilence } from '../../src/kv/kv-silence.js';

const T = 30_000;

describe('nextKvSilence: a view is blind when work went T without an event', () => {
  it('work sent, then T without an event: blind, dated from that work', () => {
    let state = nextKvSilence(KV_SILENCE_START, { type: 'sent', at: 1_000 }, T);
    expect(state).toEqual({ phase: 'waiting', since: 1_000 });
    state = nextKvSilence(state, { type: 'tick', at: 1_000 + T - 1 }, T);
    expect(state.phase).toBe('waiting');
    state = nextKvSilence(state, { type: 'tick', at: 1_000 + T }, T);
    expect(state).toEqual({ phase: 'blind', since: 1_000 });
  });

  it('without work it is never blind, however long the silence', () => {
    expect(nextKvSilence(KV_SILENCE_START, { type: 'tick', at: 10 * T }, T)).toEqual(KV_SILENCE_START);
  });

  it('an event ends waiting and blindness alike', () => {
    const waiting = nextKvSilence(KV_SILENCE_START, { type: 'sent', at: 0 }, T);
    expect(nextKvSilence(waiting, { type: 'event', at: 5 }, T)).toEqual({ phase: 'quiet', lastEventAt: 5 });
    const blind = nextKvSilence(waiting, { type: 'tick', at: T }, T);
    expect(nextKvSilence(blind, { type: 'event', at: T + 5 }, T)).toEqual({ phase: 'quiet', lastEventAt: T + 5 });
  });

  it('work told after an event that came since it was sent is already answered', () => {
    const heard = nextKvSilence(KV_SILENCE_START, { type: 'event', at: 100 }, T);
    expect(nextKvSilence(heard, { type: 'sent', at: 90 }, T)).toBe(heard);
    expect(nextKvSilence(heard, { type: 'sent', at: 110 }, T)).toEqual({ phase: 'waiting', since: 110 });
  });

  it('the silence runs from the oldest work not answered', () => {
    let state = nextKvSilence(KV_SILENCE_START, { type: 'sent', at: 500 }, T);
    state = nextKvSilence(state, { type: 'sent', at: 900 }, T);
    state = nextKvSilence(state, { type: 'sent', at: 200 }, T);
    expect(state).toEqual({ phase: 'waiting', since: 200 });
  });

  it('T = 0 turns the rule off', () => {
    const state = nextKvSilence(KV_SILENCE_START, { type: 'sent', at: 0 }, 0);
    expect(nextKvSilence(state, { type: 'tick', at: 10 * T }, 0)).toEqual(KV_SILENCE_START);
  });
});

describe('KvSilenceWatch: the rule on the clock', () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  function watching(silenceMs = T) {
    const calls: string[] = [];
    const watch = new KvSilenceWatch({
      silenceMs,
      onBlind: (since) => calls.push(`blind since ${since}`),
      onRecovered: (since) => calls.push(`recovered, blind since ${since}`),
    });
    return { watch, calls };
  }

  it('goes blind T after work with no event, once per episode, and recovers at the next event', () => {
    vi.useFakeTimers({ now: 0 });
    const { watch, calls } = watching();
    watch.sent(0);
    vi.advanceTimersByTime(T - 1);
    expect(watch.blind).toBe(false);
    vi.advanceTimersByTime(1);
    expect(watch.blind).toBe(true);
    watch.sent(Date.now());
    vi.advanceTimersByTime(5 * T);
    expect(calls).toEqual(['blind since 0']);
    watch.event();
    expect(watch.blind).toBe(false);
    vi.advanceTimersByTime(1);
    watch.sent(Date.now());
    vi.advanceTimersByTime(T);
    expect(calls).toEqual(['blind since 0', 'recovered, blind since 0', `blind since ${6 * T + 1}`]);
    expect(watch.blindCount).toBe(2);
    watch.close();
  });

  it('events that keep coming keep it from going blind', () => {
    vi.useFakeTimers({ now: 0 });
    const { watch, calls } = watching();
    for (let i = 0; i < 10; i++) {
      watch.sent(Date.now());
      vi.advanceTimersByTime(T / 2);
      watch.event();
    }
    vi.advanceTimersByTime(10 * T);
    expect(calls).toEqual([]);
    watch.close();
  });

  it('work dated in the past goes blind as soon as it is T old', () => {
    vi.useFakeTimers({ now: 10 * T });
    const { watch } = watching();
    watch.sent(9 * T);
    vi.advanceTimersByTime(0);
    expect(watch.blind).toBe(true);
    watch.close();
  });

  it('closed, it leaves no timer behind', () => {
    vi.useFakeTimers({ now: 0 });
    const { watch } = watching();
    watch.sent(0);
    watch.close();
    expect(vi.getTimerCount()).toBe(0);
  });
});
