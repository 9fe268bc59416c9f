import { describe, expect, it } from 'vitest';
import { hash32, workerId } from '../../src/routing/hash.js';

describe('hash32', () => {
  it('is pinned: the same numbers in every process and version, so that router replicas decide alike', () => {
    expect(hash32('')).toBe(2872998923);
    expect(hash32('session-42')).toBe(1249272205);
    expect(hash32('session-42', 7)).toBe(430004851);
    expect(hash32('😀')).toBe(1787143206);
  });
});

describe('workerId', () => {
  it('a string worker is its own name, another its url', () => {
    expect(workerId('http://w0', 'p')).toBe('http://w0');
    expect(workerId({ url: 'http://w1', other: 1 }, 'p')).toBe('http://w1');
  });

  it('refuses a worker without a url (null included), naming the policy that needs one', () => {
    for (const worker of [null, undefined, {}, { url: 5 }]) {
      expect(() => workerId(worker, 'somePolicy')).toThrow('somePolicy needs a stable name for each worker');
    }
  });
});
