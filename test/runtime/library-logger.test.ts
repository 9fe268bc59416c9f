import { describe, expect, it } from 'vitest';
import { UpstreamError } from '../../src/http/upstream-error.js';
import { libraryLogger } from '../../src/runtime/library-logger.js';
import { recordingLogger } from '../support/async.js';

describe('libraryLogger: the logger the library writes through', () => {
  it("keeps a worker's words out of every line, under any field; everything else goes through as it is", async () => {
    const { logger, records } = recordingLogger();
    const safe = libraryLogger(logger);
    expect(libraryLogger(logger)).toBe(safe);
    expect(libraryLogger(safe)).toBe(safe);
    const answer = UpstreamError.fromStatus('http://w:8000/v1/completions', 400, 'prompt SECRET-PROMPT-7f3a too long');
    const bug = new Error('bug');
    const plain = { requestId: 'r1', err: bug };
    safe.warn(plain, 'Failed');
    safe.info({ requestId: 'r2', failure: answer, cause: bug }, 'Retrying');
    safe.debug({ n: 1 });
    expect(records[0]).toEqual({ level: 'warn', fields: plain, message: 'Failed' });
    expect(records[0]?.fields).toBe(plain);
    expect(records[1]).toEqual({
      level: 'info',
      fields: {
        requestId: 'r2',
        failure: expect.objectContaining({ type: 'UpstreamError', status: 400, workerTextLength: 34 }),
        cause: bug,
      },
      message: 'Retrying',
    });
    expect(JSON.stringify(records)).not.toContain('SECRET');
    expect(records[2]).toEqual({ level: 'debug', fields: { n: 1 }, message: undefined });
  });
});
