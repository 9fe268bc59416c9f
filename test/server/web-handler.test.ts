import { afterEach, describe, expect, it, vi } from 'vitest';
import { createHandler, type DisaggHandler } from '../../src/server/index.js';
import { recordingLogger } from '../support/async.js';

// As on a machine where the optional dependency is not installed.
vi.mock('@kubernetes/client-node', () => {
  throw new Error("Cannot find package '@kubernetes/client-node'");
});

let handlers: DisaggHandler[] = [];
afterEach(async () => {
  await Promise.all(handlers.map((handler) => handler.close({ gracePeriodMs: 0 })));
  handlers = [];
});

describe('createHandler when its discovery cannot start', () => {
  it('every request is answered with why, in the OpenAI shape, and no address', async () => {
    const handler = createHandler({
      connector: 'vllm',
      prefill: [{ url: 'http://10.1.2.3:8100' }],
      decode: [],
      discovery: { decodeSelector: 'app=vllm,role=decode' },
      logger: recordingLogger().logger,
    });
    handlers.push(handler);
    for (let attempt = 0; attempt < 2; attempt++) {
      const response = await handler(
        new Request('http://app.test/v1/completions', { method: 'POST', body: '{"prompt":"hi","max_tokens":2}' }),
      );
      expect(response.status).toBe(500);
      const text = await response.text();
      expect(JSON.parse(text).error).toMatchObject({
        message: expect.stringContaining('needs the optional dependency @kubernetes/client-node'),
        type: 'internal_error',
        code: 500,
      });
      expect(text).not.toContain('10.1.2.3');
    }
  });
});
