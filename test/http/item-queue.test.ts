import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ItemQueue } from '../../src/http/item-queue.js';
import { propertyOptions } from '../support/property.js';

describe('ItemQueue: the pull side of a body', () => {
  it('reads in flight get items in the order they were asked, then done once finished', async () => {
    const queue = new ItemQueue<number>({ demand: () => {}, lowWater: 1 });
    const reads = [queue.next(), queue.next(), queue.next()];
    queue.push(1);
    queue.push(2);
    queue.finish();
    queue.deliver();
    expect(await Promise.all(reads)).toEqual([
      { value: 1, done: false },
      { value: 2, done: false },
      { value: undefined, done: true },
    ]);
  });

  it('asks for more when a reader waits, and when the backlog falls to the low-water mark', async () => {
    let demands = 0;
    const queue = new ItemQueue<number>({ demand: () => demands++, lowWater: 1 });
    for (const n of [1, 2, 3]) queue.push(n);
    expect(queue.backlog).toBe(3);
    await queue.next();
    expect(demands).toBe(0);
    await queue.next();
    expect(demands).toBe(1);
    await queue.next();
    const waiting = queue.next();
    expect(demands).toBe(3);
    queue.push(4);
    queue.deliver();
    expect(await waiting).toEqual({ value: 4, done: false });
  });

  it('closing drops what is queued and answers reads in flight with done', async () => {
    const queue = new ItemQueue<number>({ demand: () => {}, lowWater: 1 });
    const waiting = queue.next();
    queue.close();
    expect(await waiting).toEqual({ value: undefined, done: true });
    queue.push(1);
    expect(await queue.next()).toEqual({ value: undefined, done: true });
    expect(queue.finished).toBe(true);
  });

  it('whatever the interleaving of pushes, deliveries and reads, every item is read once, in order', async () => {
    const script = fc.array(fc.constantFrom('push', 'deliver', 'read'), { maxLength: 40 });
    await fc.assert(
      fc.asyncProperty(script, async (steps) => {
        const queue = new ItemQueue<number>({ demand: () => {}, lowWater: 2 });
        const reads: Array<Promise<IteratorResult<number, undefined>>> = [];
        let pushed = 0;
        for (const step of steps) {
          if (step === 'push') queue.push(pushed++);
          else if (step === 'deliver') queue.deliver();
          else reads.push(queue.next());
        }
        queue.finish();
        queue.deliver();
        const results = await Promise.all(reads);
        const values = results.filter((r) => r.done !== true).map((r) => r.value);
        expect(values).toEqual(values.map((_, i) => i));
        // Done only after every item pushed was read.
        if (results.some((r) => r.done === true)) expect(values).toHaveLength(pushed);
        for (let rest = await queue.next(); rest.done !== true; rest = await queue.next()) values.push(rest.value);
        expect(values).toEqual(Array.from({ length: pushed }, (_, i) => i));
      }),
      propertyOptions(200, 31),
    );
  });
});
