import type { Dispatcher } from 'undici';
import { describe, expect, it } from 'vitest';
import { type BodySink, UpstreamCall } from '../../src/http/upstream-call.js';
import { Controller } from '../../src/runtime/controller.js';
import { flush } from '../support/async.js';

/**
 * A dispatcher the test drives: it keeps the handler and the options undici would get, and a
 * controller that records what the call asked of it.
 */
function scripted(options: { throws?: unknown } = {}) {
  const asked: string[] = [];
  let handler: Dispatcher.DispatchHandler | undefined;
  let sent: Dispatcher.DispatchOptions | undefined;
  const controller = {
    pause: () => asked.push('pause'),
    resume: () => asked.push('resume'),
    abort: (reason: Error) => asked.push(`abort: ${reason.name}: ${reason.message}`),
  } as unknown as Dispatcher.DispatchController;
  const dispatcher = {
    dispatch(opts: Dispatcher.DispatchOptions, h: Dispatcher.DispatchHandler) {
      if (options.throws !== undefined) throw options.throws;
      sent = opts;
      handler = h;
      return true;
    },
  } as unknown as Dispatcher;
  const worker = {
    asked,
    sent: () => sent,
    start: () => handler?.onRequestStart?.(controller, {}),
    head: (status = 200) => handler?.onResponseStart?.(controller, status, { 'content-type': 'text/plain' }, ''),
    data: (text: string) => handler?.onResponseData?.(controller, Buffer.from(text)),
    end: () => handler?.onResponseEnd?.(controller, {}),
    error: (error: Error) => handler?.onResponseError?.(controller, error),
  };
  return { dispatcher, worker };
}

const call = (dispatcher: Dispatcher, context = new Controller('r1')) =>
  UpstreamCall.start('http://worker:8000/v1/completions?x=1', {
    headers: { 'content-type': 'application/json' },
    body: '{"prompt":"p"}',
    context,
    dispatcher,
  });

/** A sink that writes down what it gets. */
function recordingSink(): BodySink & { got: string[] } {
  const got: string[] = [];
  return {
    got,
    data: (chunk) => got.push(`data ${chunk.toString()}`),
    end: () => got.push('end'),
    error: (error) => got.push(`error ${error.message}`),
  };
}

describe('UpstreamCall', () => {
  it("sends one POST to the URL's origin and path with its query, the headers and the body", () => {
    const { dispatcher, worker } = scripted();
    call(dispatcher);
    expect(worker.sent()).toEqual({
      origin: 'http://worker:8000',
      path: '/v1/completions?x=1',
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{"prompt":"p"}',
    });
  });

  it('a 1xx is not the answer: the head is the first final status', async () => {
    const { dispatcher, worker } = scripted();
    const upstream = call(dispatcher);
    worker.start();
    worker.head(100);
    worker.head(503);
    expect(await upstream.head).toEqual({ statusCode: 503, headers: { 'content-type': 'text/plain' } });
  });

  it('what arrives before a sink is kept and handed over in order, then the rest as it comes', async () => {
    const { dispatcher, worker } = scripted();
    const upstream = call(dispatcher);
    worker.start();
    worker.head();
    worker.data('a');
    worker.data('b');
    const sink = recordingSink();
    upstream.attach(sink);
    worker.data('c');
    worker.end();
    expect(sink.got).toEqual(['data a', 'data b', 'data c', 'end']);
  });

  it('an end or a failure that came before the sink is kept for it too', async () => {
    for (const last of ['end', 'error'] as const) {
      const { dispatcher, worker } = scripted();
      const upstream = call(dispatcher);
      worker.start();
      worker.head();
      worker.data('a');
      if (last === 'end') worker.end();
      else worker.error(new Error('socket hang up'));
      const sink = recordingSink();
      upstream.attach(sink);
      expect(sink.got).toEqual(['data a', last === 'end' ? 'end' : 'error socket hang up']);
    }
  });

  it('a failure before the head rejects the head; the body says nothing after it', async () => {
    const { dispatcher, worker } = scripted();
    const upstream = call(dispatcher);
    worker.start();
    worker.error(new Error('connect ECONNREFUSED'));
    await expect(upstream.head).rejects.toThrow('connect ECONNREFUSED');
    const sink = recordingSink();
    upstream.attach(sink);
    worker.error(new Error('again'));
    expect(sink.got).toEqual([]);
  });

  it('text() is the whole body, or the failure that broke it', async () => {
    const ok = scripted();
    const whole = call(ok.dispatcher);
    ok.worker.start();
    ok.worker.head(400);
    const text = whole.text();
    ok.worker.data('{"error":');
    ok.worker.data('"bad"}');
    ok.worker.end();
    expect(await text).toBe('{"error":"bad"}');
    const broken = scripted();
    const cut = call(broken.dispatcher);
    broken.worker.start();
    broken.worker.head(500);
    const failed = cut.text();
    broken.worker.error(new Error('reset'));
    await expect(failed).rejects.toThrow('reset');
  });

  it('pause and resume reach undici once each; asked before undici is ready, a pause applies when it is; none after the end', () => {
    const { dispatcher, worker } = scripted();
    const upstream = call(dispatcher);
    upstream.resume(); // not paused: nothing to resume
    upstream.pause();
    upstream.pause();
    expect(worker.asked).toEqual([]);
    worker.start();
    expect(worker.asked).toEqual(['pause']);
    upstream.resume();
    upstream.resume();
    upstream.pause();
    expect(worker.asked).toEqual(['pause', 'resume', 'pause']);
    upstream.resume();
    worker.head();
    worker.end();
    upstream.pause();
    upstream.abort();
    expect(worker.asked).toEqual(['pause', 'resume', 'pause', 'resume']);
  });

  it('a pause taken back before undici is ready leaves nothing to apply', () => {
    const { dispatcher, worker } = scripted();
    const upstream = call(dispatcher);
    upstream.pause();
    upstream.resume();
    worker.start();
    expect(worker.asked).toEqual([]);
  });

  it('an abort before undici is ready applies when it is, with the first reason; the default reason is an AbortError', () => {
    const early = scripted();
    const upstream = call(early.dispatcher);
    upstream.abort(new Error('first'));
    upstream.abort(new Error('second'));
    expect(early.worker.asked).toEqual([]);
    early.worker.start();
    expect(early.worker.asked).toEqual(['abort: Error: first']);
    const plain = scripted();
    const other = call(plain.dispatcher);
    plain.worker.start();
    other.abort();
    expect(plain.worker.asked).toEqual(['abort: AbortError: The call was aborted']);
  });

  it("a context stopped before the call fails its head with the context's reason and sends nothing; a stop later aborts it", async () => {
    const { dispatcher, worker } = scripted();
    const stopped = new Controller('r2');
    stopped.stop();
    const never = call(dispatcher, stopped);
    await expect(never.head).rejects.toMatchObject({ name: 'AbortError', message: 'Request r2 was stopped' });
    expect(worker.sent()).toBeUndefined();
    const context = new Controller('r3');
    call(dispatcher, context);
    worker.start();
    context.kill();
    await flush();
    expect(worker.asked).toEqual(['abort: AbortError: Request r3 was killed']);
  });

  it('a dispatcher that throws fails the head with what it threw (a non-error as an Error)', async () => {
    await expect(call(scripted({ throws: new TypeError('bad origin') }).dispatcher).head).rejects.toThrow('bad origin');
    await expect(call(scripted({ throws: 'plain' }).dispatcher).head).rejects.toThrow('plain');
  });
});
