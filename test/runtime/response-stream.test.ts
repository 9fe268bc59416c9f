import { describe, expect, it } from 'vitest';
import { Controller } from '../../src/runtime/controller.js';
import { ResponseStream } from '../../src/runtime/response-stream.js';

describe('ResponseStream', () => {
  it('iterates its source and exposes its context', async () => {
    async function* numbers() {
      yield 1;
      yield 2;
    }
    const context = new Controller();
    const stream = new ResponseStream(numbers(), context);
    expect(stream.context).toBe(context);
    const seen: number[] = [];
    for await (const n of stream) seen.push(n);
    expect(seen).toEqual([1, 2]);
  });

  it("hands out the source's own iterator, so closing the stream closes the source", async () => {
    let closed = false;
    async function* endless() {
      try {
        for (;;) yield 0;
      } finally {
        closed = true;
      }
    }
    const source = endless();
    const stream = new ResponseStream(source, new Controller());
    expect(stream[Symbol.asyncIterator]()).toBe(source);
    for await (const _ of stream) break;
    expect(closed).toBe(true);
  });

  it('refuses a source that is not async iterable, and a missing context', () => {
    expect(() => new ResponseStream([1, 2] as unknown as AsyncIterable<number>, new Controller())).toThrow(
      'ResponseStream expects an AsyncIterable source',
    );
    expect(() => new ResponseStream((async function* () {})(), undefined as unknown as Controller)).toThrow(
      'ResponseStream expects an AsyncEngineContext',
    );
    expect(() => new ResponseStream((async function* () {})(), { id: 'x' } as unknown as Controller)).toThrow(
      'ResponseStream expects an AsyncEngineContext',
    );
  });
});

describe('ResponseStream.cancel', () => {
  it('closes the iterator a reader already made, not a new one; with none, it makes one and closes it', async () => {
    const made: Array<{ closed: number }> = [];
    const source: AsyncIterable<number> = {
      [Symbol.asyncIterator]() {
        const record = { closed: 0 };
        made.push(record);
        return {
          next: async () => ({ value: 1, done: false }),
          return: async () => {
            record.closed += 1;
            return { value: undefined, done: true };
          },
        };
      },
    };
    const read = new ResponseStream(source, new Controller());
    read[Symbol.asyncIterator]();
    read.cancel();
    expect(made.map((record) => record.closed)).toEqual([1]);
    const unread = new ResponseStream(source, new Controller());
    unread.cancel();
    expect(made.map((record) => record.closed)).toEqual([1, 1]);
  });
});
