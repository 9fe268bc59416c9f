// One worker checked as the admin API and discovery add it (`checkWorker`).
import { describe, expect, it } from 'vitest';
import { checkWorker } from '../../../src/server/settings/workers.js';

const vllm = { connector: 'vllm', bootstrapPort: 8998 } as const;

describe('checkWorker', () => {
  it('an empty URL, nothing, or a list of other than one is refused as what a worker is', () => {
    for (const [given, shown] of [
      ['', '""'],
      [undefined, 'undefined'],
      [[], '[]'],
    ] as const) {
      expect(() => checkWorker('decode', given, vllm)).toThrow(
        `A decode worker is a URL or an object with a url, got ${shown}`,
      );
    }
  });

  it('a URL, an entry or a list of one entry is one worker', () => {
    expect(checkWorker('decode', 'http://d.example:8000', vllm)).toEqual({ url: 'http://d.example:8000' });
    expect(checkWorker('prefill', [{ url: 'http://p.example:8000', name: 'p' }], vllm)).toEqual({
      url: 'http://p.example:8000',
      name: 'p',
    });
  });
});
