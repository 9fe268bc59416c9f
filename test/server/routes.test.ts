import type { IncomingMessage } from 'node:http';
import { describe, expect, it } from 'vitest';
import { routeLabel } from '../../src/server/routes.js';

const req = (method: string, url: string) => ({ method, url, headers: {} }) as IncomingMessage;

describe('routeLabel: the route a request is counted under, from a bounded set', () => {
  it.each([
    ['POST', '/v1/completions', 'completions'],
    ['POST', '/v1/chat/completions', 'chat'],
    ['POST', '/generate', 'generate'],
    ['GET', '/v1/models', 'models'],
    ['GET', '/health', 'health'],
    ['GET', '/ready', 'ready'],
    ['GET', '/metrics', 'metrics'],
    ['GET', '/admin/workers', 'admin'],
    ['POST', '/admin/workers', 'admin'],
    ['DELETE', '/admin/workers/decode-0', 'admin'],
    ['POST', '/admin/workers/decode-0/drain', 'admin'],
    ['GET', '/v1/completions', 'unknown'],
    ['POST', '/v1/completions/x', 'unknown'],
    ['GET', '/v1/models/llama', 'models'],
    ['POST', '/v1/models/llama', 'unknown'],
    ['GET', '/admin/workersx', 'unknown'],
    ['GET', '/v1/completions?x=1', 'unknown'],
    ['POST', '/v1/completions?stream=1', 'completions'],
  ])('%s %s is %s', (method, url, label) => {
    expect(routeLabel(req(method, url))).toBe(label);
  });

  it('a path given (mounted under a prefix) is the one labelled', () => {
    expect(routeLabel(req('POST', '/llm/v1/completions'), '/v1/completions')).toBe('completions');
  });
});
