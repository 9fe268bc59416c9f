import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { Pick, PickedAnswer, PickRequest } from '../../src/epp/endpoint-picker.js';
import { ExtProcStream, type StreamHost, usageIn } from '../../src/epp/ext-proc-stream.js';
import { wireStruct } from '../../src/epp/ext-proc-wire.js';
import { deferred, flush } from '../support/async.js';
import { type Message, requestBody, requestHeaders, responseBody, responseHeaders } from '../support/envoy-stand-in.js';
import { propertyOptions } from '../support/property.js';

/** A picker whose decision the test releases when it chooses; what the answer heard, recorded. */
function scriptedHost(refuse = false) {
  const decision = deferred<void>();
  const heard: string[] = [];
  const requests: PickRequest[] = [];
  const answer: PickedAnswer = {
    served: (endpoint) => heard.push(`served ${endpoint}`),
    responded: (status) => heard.push(`responded ${status}`),
    finished: (end, usage) =>
      heard.push(`finished ${end}${usage === undefined ? '' : ` ${usage.promptTokens}+${usage.completionTokens}`}`),
  };
  const host: StreamHost = {
    pick: async (request) => {
      requests.push(request);
      await decision.promise;
      return refuse
        ? ({ kind: 'refused', status: 503, reason: 'rejected-no-endpoints', body: { error: {} } } satisfies Pick)
        : ({
            kind: 'routed',
            destination: '10.0.0.7:8000',
            strategy: 'disaggregated',
            set: { 'x-prefiller-host-port': '10.0.0.5:8000' },
            remove: [],
            answer,
          } satisfies Pick);
    },
    picked: () => {},
    servedElsewhere: () => heard.push('elsewhere'),
    maxBodyBytes: 1 << 20,
    logger: { warn: (_: unknown, line: string) => warned.push(line), error: () => {} } as never,
  };
  const warned: string[] = [];
  const sent: Message[] = [];
  const stream = new ExtProcStream(host, (response) => sent.push(response as Message));
  return { stream, sent, heard, requests, warned, decide: () => decision.resolve() };
}

const armOf = (message: Message) => Object.keys(message).find((key) => key !== 'dynamic_metadata') as string;

describe('one ext_proc stream', () => {
  it('whatever the chunking, trailers, and moment of the decision: the headers answer first, then the body whole and in order, its end on the last chunk, then the trailers', async () => {
    await fc.assert(
      fc.asyncProperty(
        // Sizes around and past the 62,000-byte chunk: every byte its own value, so that order shows.
        fc.oneof(fc.nat(300), fc.integer({ min: 61_990, max: 200_000 })),
        fc.array(fc.integer({ min: 1, max: 70_000 }), { minLength: 1, maxLength: 8 }),
        fc.boolean(),
        fc.nat(12),
        async (size, cuts, trailers, decideAfter) => {
          const body = Buffer.from(Array.from({ length: size }, (_, i) => (i * 7 + (i >> 8)) % 256));
          const { stream, sent, decide, requests } = scriptedHost();
          const messages: Message[] = [requestHeaders('/v1/completions')];
          let at = 0;
          for (const cut of cuts) {
            if (at >= body.length) break;
            messages.push(requestBody(body.subarray(at, at + cut), false));
            at += cut;
          }
          if (at < body.length) messages.push(requestBody(body.subarray(at), false));
          // The body ends by its own flag, or by trailers.
          if (trailers) messages.push({ request_trailers: { trailers: { headers: [] } } });
          else messages.push(requestBody(Buffer.alloc(0), true));
          for (const [i, message] of messages.entries()) {
            if (i === decideAfter) decide();
            stream.receive(message);
            await flush();
          }
          decide();
          await flush();
          expect(Buffer.from(requests[0]?.body ?? []).equals(body)).toBe(true);
          const arms = sent.map(armOf);
          expect(arms[0]).toBe('request_headers');
          const chunks = sent
            .filter((m) => armOf(m) === 'request_body')
            .map((m) => m.request_body.response.body_mutation.streamed_response);
          expect(Buffer.concat(chunks.map((c) => Buffer.from(c.body))).equals(body)).toBe(true);
          expect(chunks.map((c) => c.end_of_stream === true)).toEqual(chunks.map((_, i) => i === chunks.length - 1));
          expect(arms.slice(1, 1 + chunks.length).every((arm) => arm === 'request_body')).toBe(true);
          expect(arms.slice(1 + chunks.length)).toEqual(trailers ? ['request_trailers'] : []);
        },
      ),
      propertyOptions(60, 55),
    );
  });

  it('passes the answer through: the served pod and status heard, every chunk echoed, the usage read at the end, one finish', async () => {
    const { stream, sent, heard, decide } = scriptedHost();
    decide();
    stream.receive(requestHeaders('/v1/completions'));
    stream.receive(requestBody('{}', true));
    await flush();
    stream.receive(responseHeaders(200, '10.0.0.8:8000'));
    stream.receive(responseBody('data: {"choices":[]}\n\n', false));
    stream.receive(responseBody('data: {"usage":{"prompt_tokens":7,"completion_tokens":2}}\n\ndata: [DONE]\n\n', true));
    stream.end();
    expect(heard).toEqual(['elsewhere', 'served 10.0.0.8:8000', 'responded 200', 'finished complete 7+2']);
    expect(sent.map(armOf).slice(2)).toEqual(['response_headers', 'response_body', 'response_body']);
  });

  it('gives the request up when Envoy ends the stream while the picker decides: nothing is sent, the leases go back once', async () => {
    const { stream, sent, heard, decide } = scriptedHost();
    stream.receive(requestHeaders('/v1/completions'));
    stream.receive(requestBody('{}', true));
    stream.end();
    stream.end();
    decide();
    await flush();
    expect(sent).toEqual([]);
    expect(heard).toEqual(['finished broken']);
  });

  it('ends a routed request broken when the stream breaks before its answer ends', async () => {
    const { stream, heard, decide } = scriptedHost();
    decide();
    stream.receive(requestHeaders('/v1/completions'));
    stream.receive(requestBody('{}', true));
    await flush();
    stream.receive(responseHeaders(502, undefined));
    stream.end();
    expect(heard).toEqual(['responded 502', 'finished broken']);
  });

  it('answers a refusal once, immediately, and nothing after it', async () => {
    const { stream, sent, decide } = scriptedHost(true);
    decide();
    stream.receive(requestHeaders('/v1/completions'));
    stream.receive(requestBody('{}', true));
    await flush();
    stream.receive(requestBody('late', true));
    stream.receive(responseHeaders(200, undefined));
    expect(sent.map(armOf)).toEqual(['immediate_response']);
  });

  it('does not answer messages out of order (an answer before its request was routed)', () => {
    const { stream, sent } = scriptedHost();
    stream.receive(responseHeaders(200, undefined));
    stream.receive(requestBody('x', true));
    expect(sent).toEqual([]);
  });

  it('a body past the limit is decided at once as oversized, none of it held; the rest of it is neither held, answered nor logged', async () => {
    const { stream, requests, sent, warned, decide } = scriptedHost(true);
    decide();
    stream.receive(requestHeaders('/v1/completions'));
    stream.receive(requestBody(Buffer.alloc(600_000), false));
    expect(stream.bodyBytes).toBe(600_000);
    expect(requests).toEqual([]);
    // 1,200,000 bytes: past the limit of 1 MiB, with the body not ended.
    stream.receive(requestBody(Buffer.alloc(600_000), false));
    expect(requests).toHaveLength(1);
    expect(requests[0]?.oversized).toBe(true);
    expect(requests[0]?.body.length).toBe(0);
    expect(stream.bodyBytes).toBe(0);
    for (let i = 0; i < 3; i++) stream.receive(requestBody(Buffer.alloc(600_000), i === 2));
    stream.receive({ request_trailers: { trailers: { headers: [] } } });
    await flush();
    expect(requests).toHaveLength(1);
    expect(sent.map(armOf)).toEqual(['immediate_response']);
    expect(warned).toEqual([]);
  });

  it('hands the picker a body sent in one-byte chunks whole, and sizes its buffer by the content-length it was told', async () => {
    const { stream, requests, decide } = scriptedHost();
    decide();
    const body = Buffer.from(JSON.stringify({ model: 'm', prompt: 'p'.repeat(5000) }));
    stream.receive(requestHeaders('/v1/completions', { 'content-length': String(body.length) }));
    for (let i = 0; i < body.length; i++) stream.receive(requestBody(body.subarray(i, i + 1), i === body.length - 1));
    await flush();
    const picked = requests[0]?.body as Buffer;
    expect(picked.equals(body)).toBe(true);
    // One buffer of exactly the body's size: no doubling past what the request said it has.
    expect(picked.buffer.byteLength).toBe(body.length);
  });

  it('reads the subset hint from the request headers message', async () => {
    const { stream, requests } = scriptedHost();
    stream.receive({
      ...requestHeaders('/v1/completions'),
      metadata_context: {
        filter_metadata: { 'envoy.lb.subset_hint': wireStruct({ 'x-gateway-destination-endpoint-subset': ['a:1'] }) },
      },
    });
    stream.receive(requestBody('{}', true));
    await flush();
    expect(requests[0]?.subset).toEqual(['a:1']);
  });
});

describe('usageIn', () => {
  it("reads an answer's last usage, OpenAI's names or the agents' APIs'", () => {
    expect(usageIn('data: {"usage":{"prompt_tokens":5,"completion_tokens":3}}\n\ndata: [DONE]\n\n')).toEqual({
      promptTokens: 5,
      completionTokens: 3,
    });
    expect(usageIn('{"usage":{"input_tokens":9,"output_tokens":4}}')).toEqual({ promptTokens: 9, completionTokens: 4 });
    expect(
      usageIn(
        '{"usage":{"prompt_tokens":1,"completion_tokens":1}} {"usage":{"prompt_tokens":2,"completion_tokens":6}}',
      ),
    ).toEqual({ promptTokens: 2, completionTokens: 6 });
    expect(usageIn('{"choices":[]}')).toBeUndefined();
    expect(usageIn('{"usage":null}')).toBeUndefined();
  });
});
