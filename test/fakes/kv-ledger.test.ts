import { describe, expect, it } from 'vitest';
import { type KvHandoff, KvLedger } from '../../src/fakes/kv-ledger.js';

describe('KvLedger onChange', () => {
  it('hears each handoff as it is committed and as it stops being held, with the call that committed it', () => {
    const heard: Array<[string, KvHandoff['state'], object | undefined]> = [];
    const ledger = new KvLedger({ onChange: (handoff, owner) => heard.push([handoff.key, handoff.state, owner]) });
    const call = {};
    ledger.commit('a', 'r1', call);
    ledger.commit('b', 'r2', call);
    ledger.commit('c', 'r3');
    ledger.read('a');
    ledger.strand('b');
    ledger.release('c');
    // Freed already: nothing more to hear.
    ledger.release('a');
    expect(heard).toEqual([
      ['a', 'held', call],
      ['b', 'held', call],
      ['c', 'held', undefined],
      ['a', 'claimed', call],
      ['b', 'stranded', call],
      ['c', 'released', undefined],
    ]);
  });
});
