import { describe, expect, it } from 'vitest';
import { cacheAware } from '../../src/routing/cache-aware.js';
import { RoutingInput } from '../../src/routing/routing-input.js';

const prompt = (text: string) => new RoutingInput({ prompt: text });
const SYSTEM = 'You are a careful assistant. Answer in one line. '.repeat(4);

/** Workers w0, w1, ... with these requests in flight. */
function pool(...inFlight: number[]): [string[], { inFlight: (worker: string) => number }] {
  const workers = inFlight.map((_, i) => `w${i}`);
  return [workers, { inFlight: (worker: string) => inFlight[workers.indexOf(worker)] ?? 0 }];
}

describe('cacheAware: the cache threshold', () => {
  it('a match of exactly cacheThreshold of the text is not enough: it must hold more', () => {
    const policy = cacheAware<string>(); // 0.5
    policy.tree.insert('abcdeZZZZZ', 'w0');
    expect(policy.select(...pool(1, 0), prompt('abcdeXXXXX'))).toBe('w1'); // 5 of 10
    expect(policy.select(...pool(1, 0), prompt('abcdeZXXXX'))).toBe('w0'); // 6 of 10
  });

  it('takes 0 (any match is a hit) and 1 (never a hit: the load decides) and nothing outside', () => {
    const any = cacheAware<string>({ cacheThreshold: 0 });
    any.tree.insert('aZZZZZZZZZ', 'w0');
    expect(any.select(...pool(1, 0), prompt('aXXXXXXXXX'))).toBe('w0');
    const never = cacheAware<string>({ cacheThreshold: 1 });
    never.tree.insert('all of it', 'w0');
    expect(never.select(...pool(1, 0), prompt('all of it'))).toBe('w1');
    expect(() => cacheAware({ cacheThreshold: -0.1 })).toThrow(
      'cacheAware: cacheThreshold must be a number from 0 to 1, got -0.1',
    );
  });
});

describe('cacheAware: balance', () => {
  /** The choice when w0 holds the prefix, under these loads and balance thresholds. */
  const chooser =
    (balanceAbsThreshold: number, balanceRelThreshold: number) =>
    (...inFlight: number[]) => {
      const policy = cacheAware<string>({ balanceAbsThreshold, balanceRelThreshold });
      policy.tree.insert(`${SYSTEM}x`, 'w0');
      return policy.select(...pool(...inFlight), prompt(`${SYSTEM}y`));
    };

  it('imbalanced takes a gap of more than balanceAbsThreshold, not equal to it', () => {
    const chosen = chooser(4, 1.5);
    expect(chosen(10, 6)).toBe('w0'); // 4 more: not more than 4 (and 10 > 1.5 x 6)
    expect(chosen(11, 6)).toBe('w1');
  });

  it('imbalanced takes more than balanceRelThreshold times the idlest, not exactly it', () => {
    const chosen = chooser(4, 2);
    expect(chosen(10, 5)).toBe('w0'); // 5 more, but exactly 2 x 5
    expect(chosen(11, 5)).toBe('w1');
  });

  it('the gap is the busiest minus the idlest: small loads far apart in ratio are balanced', () => {
    expect(chooser(4, 2)(4, 1)).toBe('w0'); // 4 x the idlest, but only 3 more
  });

  it('the idlest and the busiest are found wherever they are in the list', () => {
    const chosen = chooser(4, 2);
    // w1 is the idlest, in the middle: 12 - 3 > 4 and 12 > 2 x 3.
    expect(chosen(12, 3, 9)).toBe('w1');
    expect(chosen(9, 12, 3)).toBe('w2');
  });
});

describe('cacheAware: ties and text-less requests', () => {
  it('what a worker holds only breaks ties of load: a request without text goes to the least loaded even if it holds the most', () => {
    const policy = cacheAware<string>();
    policy.tree.insert('a long text the first worker holds', 'w0');
    expect(policy.select(...pool(0, 5), new RoutingInput({ model: 'm' }))).toBe('w0');
    expect(policy.select(...pool(0, 0), new RoutingInput({ model: 'm' }))).toBe('w1'); // the tie: w1 has room
  });

  it('a leg completed without an input records nothing', () => {
    const policy = cacheAware<string>();
    policy.completed?.('w0', undefined, 'success');
    expect(policy.tree.sizeOf('w0')).toBe(0);
  });
});

describe('cacheAware: cachedShare', () => {
  it('the largest share of the text one of the candidates holds; 0 for a request without text', () => {
    const policy = cacheAware<string>();
    policy.tree.insert('abcdefgh', 'w1');
    expect(policy.cachedShare?.(['w0', 'w1'], prompt('abcdWXYZ'))).toBe(0.5);
    expect(policy.cachedShare?.(['w0', 'w1'], prompt('abcdefgh'))).toBe(1);
    expect(policy.cachedShare?.(['w0'], prompt('abcdWXYZ'))).toBe(0);
    expect(policy.cachedShare?.(['w0', 'w1'], new RoutingInput({ model: 'm' }))).toBe(0);
  });
});

describe('cacheAware: options', () => {
  it('an option given as undefined takes its default', () => {
    const policy = cacheAware<string>({ cacheThreshold: undefined, maxTreeChars: undefined });
    policy.tree.insert('abcdeZZZZZ', 'w0');
    expect(policy.select(...pool(1, 0), prompt('abcdeXXXXX'))).toBe('w1'); // 0.5 of it: not above 0.5
    expect(policy.select(...pool(1, 0), prompt('abcdeZXXXX'))).toBe('w0');
  });

  it('refuses a threshold that is not a number (a string from a config file), and a tree of no characters', () => {
    expect(() => cacheAware({ cacheThreshold: '0.5' as unknown as number })).toThrow(
      'cacheAware: cacheThreshold must be a number from 0 to 1',
    );
    expect(() => cacheAware({ balanceAbsThreshold: '8' as unknown as number })).toThrow('balanceAbsThreshold');
    expect(() => cacheAware({ maxTreeChars: 0 })).toThrow(
      'cacheAware: maxTreeChars must be a positive whole number of characters, got 0',
    );
    expect(cacheAware({ maxTreeChars: 1 }).name).toBe('cache-aware');
  });
});
