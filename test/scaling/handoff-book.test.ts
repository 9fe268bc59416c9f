import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { FlowEvent } from '../../src/flow/events.js';
import { HandoffBook, type HandoffPhase, nextHandoffPhase } from '../../src/scaling/handoff-book.js';

const event = (type: FlowEvent['type']) => ({ type }) as FlowEvent;

function booked() {
  let now = 0;
  const book = new HandoffBook(() => now);
  const closed: Array<[number, string]> = [];
  const listen = book.listener('p', (age, end) => closed.push([age, end]));
  return { book, closed, listen, at: (ms: number) => (now = ms) };
}

describe('the handoffs outstanding', () => {
  it('a sequential handoff is outstanding from the handoff after prefill until decode claims it, with its age', () => {
    const { book, closed, listen, at } = booked();
    listen(event('prefillCompleted'));
    expect(book.outstanding('p')).toBe(0);
    at(100);
    listen(event('handoff'));
    expect(book.outstanding('p')).toBe(1);
    at(1600);
    expect(book.oldestSeconds('p')).toBe(1.5);
    listen(event('kvClaimed'));
    expect(book.outstanding('p')).toBe(0);
    expect(book.oldestSeconds('p')).toBe(0);
    expect(closed).toEqual([[1.5, 'claimed']]);
  });

  it('a rendezvous claimed before its prefill completes is never outstanding', () => {
    const { book, closed, listen } = booked();
    for (const type of ['handoff', 'kvClaimed', 'prefillCompleted', 'settled'] as const) listen(event(type));
    expect(book.outstanding('p')).toBe(0);
    expect(closed).toEqual([]);
  });

  it('a handoff given up (released, orphaned, retried, settled unclaimed) closes as released', () => {
    for (const end of ['handoffReleased', 'cleanupExpired', 'prefillRetried', 'settled'] as const) {
      const { book, closed, listen } = booked();
      listen(event('prefillCompleted'));
      listen(event('handoff'));
      listen(event(end));
      expect(book.outstanding('p'), end).toBe(0);
      expect(closed, end).toEqual([[0, 'released']]);
    }
  });

  it('the oldest is the first still outstanding', () => {
    let now = 0;
    const book = new HandoffBook(() => now);
    const first = book.listener('p', () => {});
    const second = book.listener('p', () => {});
    for (const listen of [first, second]) {
      listen(event('prefillCompleted'));
      listen(event('handoff'));
      now += 1000;
    }
    expect(book.oldestSeconds('p')).toBe(2);
    first(event('kvClaimed'));
    expect(book.oldestSeconds('p')).toBe(1);
  });

  it('under any order of events, at most one handoff is open per request and each opened one closes once', () => {
    const types: FlowEvent['type'][] = [
      'prefillCompleted',
      'handoff',
      'kvClaimed',
      'handoffReleased',
      'cleanupExpired',
      'prefillRetried',
      'decodeRetried',
    ];
    fc.assert(
      fc.property(fc.array(fc.constantFrom(...types), { maxLength: 20 }), (sequence) => {
        const { book, closed, listen } = booked();
        let opened = 0;
        for (const type of [...sequence, 'settled' as const]) {
          const before = book.outstanding('p');
          listen(event(type));
          expect(book.outstanding('p')).toBeLessThanOrEqual(1);
          if (book.outstanding('p') > before) opened++;
        }
        expect(book.outstanding('p')).toBe(0);
        expect(closed.length).toBe(opened);
      }),
    );
  });

  it('a phase moves only on the events that concern it', () => {
    const waiting: HandoffPhase = { kind: 'waiting', prefilled: false, handedOff: false };
    expect(nextHandoffPhase(waiting, 'firstToken')).toBe(waiting);
    expect(nextHandoffPhase({ kind: 'claimed' }, 'handoff')).toEqual({ kind: 'claimed' });
  });
});
