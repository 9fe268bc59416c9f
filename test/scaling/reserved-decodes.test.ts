import { describe, expect, it } from 'vitest';
import type { FlowEvent } from '../../src/flow/events.js';
import { ReservedDecodes } from '../../src/scaling/reserved-decodes.js';

const routed = (strategy: string, decodeWorker?: unknown) =>
  ({ type: 'routed', strategy, decodeWorker }) as unknown as FlowEvent;
const event = (type: FlowEvent['type']) => ({ type }) as FlowEvent;

describe('decode legs reserved while their prefill runs', () => {
  it('a disaggregated request reserves its decode worker, with its tokens, until decode is dispatched', () => {
    const reserved = new ReservedDecodes();
    const listen = reserved.listener('p', () => 120);
    listen(routed('sequential', 'd0'));
    expect(reserved.on('p', 'd0')).toBe(1);
    expect(reserved.of('p')).toEqual({ requests: 1, tokens: 120 });
    listen(event('decodeDispatched'));
    expect(reserved.on('p', 'd0')).toBe(0);
    expect(reserved.of('p')).toEqual({ requests: 0, tokens: 0 });
    listen(event('settled'));
    expect(reserved.of('p')).toEqual({ requests: 0, tokens: 0 });
  });

  it('an aggregated request reserves nothing', () => {
    const reserved = new ReservedDecodes();
    reserved.listener('p', () => 5)(routed('aggregated', 'd0'));
    expect(reserved.of('p')).toEqual({ requests: 0, tokens: 0 });
  });

  it('a retry from prefill gives its reservation back, and the new route reserves again', () => {
    const reserved = new ReservedDecodes();
    const listen = reserved.listener('p', () => 10);
    listen(routed('sequential', 'd0'));
    listen(event('prefillRetried'));
    listen(routed('sequential', 'd1'));
    expect(reserved.on('p', 'd0')).toBe(0);
    expect(reserved.on('p', 'd1')).toBe(1);
    listen(event('finished'));
    expect(reserved.of('p')).toEqual({ requests: 0, tokens: 0 });
  });
});
