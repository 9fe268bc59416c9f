import { EventEmitter } from 'node:events';
import type { ServerResponse } from 'node:http';
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { Controller } from '../../../src/runtime/controller.js';
import { type InFlightRequest, InFlightRequests } from '../../../src/server/pipeline/in-flight.js';

afterEach(() => {
  vi.useRealTimers();
});

/** A request under way whose response ends when its shutdown is called (or never, `deaf`). */
function request(deaf = false) {
  const res = Object.assign(new EventEmitter(), { writableFinished: false, destroyed: false });
  const shutdown = vi.fn(() => {
    if (deaf) return;
    res.writableFinished = true;
    res.emit('finish');
  });
  const entry: InFlightRequest = { context: {} as Controller, res: res as unknown as ServerResponse, shutdown };
  return { entry, shutdown, res };
}

describe('InFlightRequests.drain', () => {
  it('with nothing under way it ends at once', async () => {
    vi.useFakeTimers();
    const inFlight = new InFlightRequests();
    await inFlight.drain(30_000);
    expect(vi.getTimerCount()).toBe(0);
  });

  it('requests that finish within the grace period are not cut: it ends with the last of them', async () => {
    vi.useFakeTimers();
    const inFlight = new InFlightRequests();
    const [a, b] = [request(), request()];
    inFlight.add(a.entry);
    inFlight.add(b.entry);
    expect(inFlight.size).toBe(2);
    let done = false;
    const draining = inFlight.drain(30_000).then(() => {
      done = true;
    });
    await vi.advanceTimersByTimeAsync(1000);
    inFlight.delete(a.entry);
    await vi.advanceTimersByTimeAsync(0);
    expect(done).toBe(false);
    inFlight.delete(b.entry);
    await draining;
    expect([a.shutdown, b.shutdown].map((fn) => fn.mock.calls.length)).toEqual([0, 0]);
    expect(vi.getTimerCount()).toBe(0);
  });

  it('after the grace period the rest are shut down, and their last words awaited', async () => {
    vi.useFakeTimers();
    const inFlight = new InFlightRequests();
    const slow = request();
    inFlight.add(slow.entry);
    let done = false;
    const draining = inFlight.drain(5000).then(() => {
      done = true;
    });
    await vi.advanceTimersByTimeAsync(4999);
    expect(slow.shutdown).not.toHaveBeenCalled();
    await vi.advanceTimersByTimeAsync(1);
    expect(slow.shutdown).toHaveBeenCalledTimes(1);
    await draining;
    expect(done).toBe(true);
    expect(vi.getTimerCount()).toBe(0);
  });

  it('a client that does not read its last words is waited for lastWordsMs at most (1 s by default)', async () => {
    vi.useFakeTimers();
    for (const [lastWordsMs, wait] of [
      [undefined, 1000],
      [200, 200],
    ] as const) {
      const inFlight = new InFlightRequests();
      const deaf = request(true);
      inFlight.add(deaf.entry);
      let done = false;
      const draining = inFlight.drain(0, lastWordsMs).then(() => {
        done = true;
      });
      await vi.advanceTimersByTimeAsync(wait - 1);
      expect(done).toBe(false);
      await vi.advanceTimersByTimeAsync(1);
      await draining;
      expect(deaf.shutdown).toHaveBeenCalledTimes(1);
    }
  });

  it('a response already finished or destroyed is not waited for', async () => {
    vi.useFakeTimers();
    const inFlight = new InFlightRequests();
    const gone = request(true);
    gone.res.destroyed = true;
    inFlight.add(gone.entry);
    let done = false;
    const draining = inFlight.drain(0).then(() => {
      done = true;
    });
    await vi.advanceTimersByTimeAsync(0);
    expect(done).toBe(true);
    await draining;
    expect(gone.shutdown).toHaveBeenCalledTimes(1);
    expect(vi.getTimerCount()).toBe(0);
  });
});
