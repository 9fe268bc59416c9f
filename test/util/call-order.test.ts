import { describe, expect, it } from 'vitest';
import { CallOrder } from '../../src/util/call-order.js';
import { type Deferred, deferred, flush } from '../support/async.js';

/** A reader over hand-settled reads: `reads` are the reads started, in order. */
function reader() {
  const reads: Deferred<string>[] = [];
  const order: CallOrder<string> = new CallOrder(() => {
    const read = deferred<string>();
    reads.push(read);
    const settled = () => order.settled();
    read.promise.then(settled, settled);
    return read.promise;
  });
  return { order, reads };
}

describe('CallOrder', () => {
  it('reads at once when nothing earlier waits; a call made meanwhile reads only after that answer', async () => {
    const { order, reads } = reader();
    expect(order.idle).toBe(true);
    const first = order.call();
    const second = order.call();
    expect(order.idle).toBe(false);
    expect(reads).toHaveLength(1); // one read at a time
    reads[0]?.resolve('a');
    expect(await first).toBe('a');
    await flush();
    expect(reads).toHaveLength(2);
    reads[1]?.resolve('b');
    expect(await second).toBe('b');
    await flush();
    expect(order.idle).toBe(true);
  });

  it('answers settle in call order even when later reads answer faster', async () => {
    const { order, reads } = reader();
    const settledOrder: number[] = [];
    const calls = [order.call(), order.call(), order.call()];
    for (const [i, call] of calls.entries()) call.then(() => settledOrder.push(i));
    reads[0]?.resolve('a');
    await flush();
    reads[1]?.resolve('b');
    await flush();
    reads[2]?.resolve('c');
    expect(await Promise.all(calls)).toEqual(['a', 'b', 'c']);
    expect(settledOrder).toEqual([0, 1, 2]);
  });

  it('a failed read does not stop the calls behind it', async () => {
    const { order, reads } = reader();
    const first = order.call();
    const second = order.call();
    reads[0]?.reject(new Error('reset'));
    await expect(first).rejects.toThrow('reset');
    await flush();
    reads[1]?.resolve('b');
    expect(await second).toBe('b');
  });
});
