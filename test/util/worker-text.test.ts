import { describe, expect, it } from 'vitest';
import { PrefillError } from '../../src/handoff/prefill-error.js';
import { UpstreamError } from '../../src/http/upstream-error.js';
import { Annotated } from '../../src/protocol/annotated.js';
import { briefly, holdsWorkerText, loggable, markWorkerText, safeMessage } from '../../src/util/worker-text.js';

const url = 'http://10.0.0.2:8200/v1/completions';
const SAID = "maximum context length is 4096 tokens; your prompt 'SECRET-PROMPT-7f3a' is too long";

describe("a worker's words in an error: a client's to read, no log line's", () => {
  it("a worker's 400 is logged as its type, code, status and the length of its words: not the words, no stack", () => {
    const error = UpstreamError.fromStatus(url, 400, JSON.stringify({ error: { message: SAID } }));
    // The client's message keeps them.
    expect(error.message).toBe(`${url} answered 400: ${SAID}`);
    expect(loggable(error)).toStrictEqual({
      type: 'UpstreamError',
      error: `${url} answered 400: [the worker's text: ${SAID.length} characters]`,
      code: 'DISAGG_UPSTREAM_STATUS',
      status: 400,
      workerTextLength: SAID.length,
    });
    expect(JSON.stringify(loggable(error))).not.toContain('SECRET');
  });

  it("a PrefillError holds its cause's words in its own message: both are masked", () => {
    const error = PrefillError.from(UpstreamError.fromStatus(url, 400, SAID));
    expect(error.message).toContain(SAID);
    expect(loggable(error)).toMatchObject({
      type: 'PrefillError',
      code: 'DISAGG_PREFILL_FAILED',
      status: 400,
      workerTextLength: SAID.length,
    });
    expect(safeMessage(error)).toBe(
      `Prefill execution failed: ${url} answered 400: [the worker's text: ${SAID.length} characters]`,
    );
    expect(briefly(error)).toStrictEqual({ error: safeMessage(error), code: 'DISAGG_PREFILL_FAILED' });
  });

  it("every way a worker's words reach an error is marked: an error event, an error item's text, an answer that is not JSON", () => {
    const event = new UpstreamError('status', `${url} sent an error event: ${SAID}`, { url, body: SAID });
    expect(safeMessage(event)).not.toContain('SECRET');
    const item = Annotated.err(JSON.parse(JSON.stringify(Annotated.fromError(SAID))));
    expect(safeMessage(item)).toBe(`[the worker's text: ${SAID.length} characters]`);
    let syntax: unknown;
    try {
      JSON.parse(`{"prompt": ${SAID}}`);
    } catch (error) {
      syntax = error;
    }
    const garbled = UpstreamError.fromFailure(url, syntax);
    expect(garbled.kind).toBe('protocol');
    expect(safeMessage(garbled)).not.toContain('SECRET');
    // The router's own words and a connection failure are kept as they are, stack and all.
    const refused = UpstreamError.fromFailure(
      url,
      Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' }),
    );
    expect(loggable(refused)).toBe(refused);
    const aborted = new UpstreamError('status', `${url} aborted the request`, { url, body: SAID });
    expect(loggable(aborted)).toBe(aborted);
  });

  it("a message of its own says where the words are (workerText); an error of anyone's may be marked", () => {
    const own = new UpstreamError('status', `the worker said «${SAID}» to us`, { url, workerText: SAID });
    expect(safeMessage(own)).toBe(`the worker said «[the worker's text: ${SAID.length} characters]» to us`);
    const plain = new Error(`wrapped: ${SAID}`);
    markWorkerText(plain, SAID);
    expect(Object.keys(plain)).toEqual([]);
    expect(JSON.stringify(plain)).toBe('{}');
    expect(loggable(new Error('outer', { cause: plain }))).toMatchObject({ type: 'Error', error: 'outer' });
  });

  it("anything else is left as it is; a line's fields are looked at only for what they hold", () => {
    for (const value of [undefined, null, 'text', 3, { a: 1 }, new Error('bug')]) expect(loggable(value)).toBe(value);
    expect(holdsWorkerText({ requestId: 'r', err: new Error('bug'), status: 500 })).toBe(false);
    expect(holdsWorkerText({ err: UpstreamError.fromStatus(url, 400, SAID) })).toBe(true);
    expect(safeMessage('a string')).toBe('a string');
  });
});
