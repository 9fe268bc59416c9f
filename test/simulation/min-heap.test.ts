import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { MinHeap } from '../../src/simulation/min-heap.js';

describe('the min-heap', () => {
  it('gives its items back in order, whatever order they went in', () => {
    fc.assert(
      fc.property(fc.array(fc.integer()), (values) => {
        const heap = new MinHeap<number>((a, b) => a < b);
        for (const value of values) heap.push(value);
        expect(heap.size).toBe(values.length);
        const out: number[] = [];
        for (let value = heap.pop(); value !== undefined; value = heap.pop()) out.push(value);
        expect(out).toEqual([...values].sort((a, b) => a - b));
        expect(heap.peek()).toBeUndefined();
      }),
    );
  });
});
