import { describe, expect, it } from 'vitest';
import type { EngineItem } from '../../src/protocol/annotated.js';
import { Annotated, AnnotatedError, wiredData } from '../../src/protocol/annotated.js';
import { LLMEngineOutput } from '../../src/protocol/llm-engine-output.js';

const roundTrip = <T>(value: T): T => JSON.parse(JSON.stringify(value));

describe('Annotated', () => {
  it('fromData wraps data and is not an error', () => {
    const item = Annotated.fromData(LLMEngineOutput.length());
    expect(item).toEqual({ data: { token_ids: [], finish_reason: 'length' } });
    expect(Annotated.isError(item)).toBe(false);
    expect(Annotated.err(item)).toBeUndefined();
  });

  it('fromError(string) writes the message where new and old readers look for it', () => {
    const item = Annotated.fromError('decode worker lost');
    expect(roundTrip(item)).toEqual({ event: 'error', comment: ['decode worker lost'], error: 'decode worker lost' });
  });

  it('fromError(Error) returns the very same error in process, with its type and cause', () => {
    const cause = new Error('ECONNRESET');
    const original = new TypeError('bad gateway', { cause });
    const item = Annotated.fromError(original);
    expect(Annotated.err(item)).toBe(original);
    expect(Object.keys(item)).toEqual(['event', 'comment', 'error']);
  });

  it('an error item survives JSON and is still recognised with its message', () => {
    const wire = roundTrip(Annotated.fromError(new Error('prefill connection lost')));
    expect(Annotated.isError(wire)).toBe(true);
    const error = Annotated.err(wire);
    expect(error).toBeInstanceOf(AnnotatedError);
    expect(error?.name).toBe('AnnotatedError');
    expect(error?.message).toBe('prefill connection lost');
  });

  it('reads the older form, with the message only in comment', () => {
    const old = { event: 'error', comment: ['worker', 'gone'] };
    expect(Annotated.err(old)?.message).toBe('worker, gone');
  });

  it('reads the object form of error and an error field without an event', () => {
    expect(Annotated.err({ error: { message: 'quota', code: 429 } })?.message).toBe('quota');
    expect(Annotated.isError({ error: 'x' })).toBe(true);
  });

  it('an error item without any text still yields an error', () => {
    expect(Annotated.err({ event: 'error' })?.message).toBe('unknown error');
    expect(Annotated.fromError(new Error('')).error).toBe('Error');
  });

  it.each([null, undefined, 42, 'error', { event: 'metrics' }, { data: {} }])('isError(%j) is false', (value) => {
    expect(Annotated.isError(value)).toBe(false);
    expect(Annotated.err(value)).toBeUndefined();
  });
});

describe('Annotated.fromData types an engine output written in place', () => {
  it('as an engine item, finish reason and all, without `as const` (a type error before)', () => {
    const item: EngineItem = Annotated.fromData({ token_ids: [], finish_reason: 'length' });
    expect(item.data?.finish_reason).toBe('length');
    // Anything else keeps its own type.
    const other = Annotated.fromData({ kind: 'note' });
    expect(other.data?.kind).toBe('note');
  });
});

describe('Annotated.wire: what a worker sent for an item', () => {
  const chunk = { form: 'event', text: '{"a":1}', json: { a: 1 } } as const;

  it.each([
    ['withWire', () => Annotated.withWire({ data: { a: 1 } }, [chunk])],
    ['wiredData (the transport per token)', () => wiredData({ a: 1 }, [chunk])],
  ])('%s: readable, but not in JSON, not copied by a spread, not part of a comparison', (_, make) => {
    const item = make();
    expect(Annotated.wire(item)).toEqual([chunk]);
    expect(JSON.stringify(item)).toBe('{"data":{"a":1}}');
    expect(Annotated.wire({ ...item })).toBeUndefined();
    expect(item).toEqual({ data: { a: 1 } });
    // A rewrite says what was sent for the new item.
    expect(Annotated.wire(Annotated.withWire(item, []))).toEqual([]);
  });

  it('an item without data stays without it; a plain item has no wire', () => {
    expect(Object.keys(wiredData(undefined, [chunk]))).toEqual([]);
    expect(Annotated.wire({ data: 1 })).toBeUndefined();
    expect(Annotated.wire(null)).toBeUndefined();
  });
});
