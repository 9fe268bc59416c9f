import { describe, expect, it } from 'vitest';
import { isUnder, joinUrl, trimSlash } from '../../src/util/url.js';

describe('worker URLs', () => {
  it('trimSlash: one worker whether its URL ends in slashes or not', () => {
    expect(['http://p0:8000', 'http://p0:8000/', 'http://p0:8000//'].map(trimSlash)).toEqual(
      Array(3).fill('http://p0:8000'),
    );
    expect(trimSlash('/')).toBe('');
  });

  it('joinUrl: one slash between the base and the path', () => {
    expect(joinUrl('http://p0/', '/health')).toBe('http://p0/health');
    expect(joinUrl('http://p0', '/v1/models')).toBe('http://p0/v1/models');
  });

  it('isUnder: a call to the worker or under it, never to a worker whose name only starts the same', () => {
    expect(isUnder('http://decode-1/v1/completions', 'http://decode-1')).toBe(true);
    expect(isUnder('http://decode-1/v1/completions', 'http://decode-1/')).toBe(true);
    expect(isUnder('http://decode-1', 'http://decode-1/')).toBe(true);
    expect(isUnder('http://decode-10/v1/completions', 'http://decode-1')).toBe(false);
    expect(isUnder('http://p0:8000/generate', 'http://p0:800')).toBe(false);
  });
});
