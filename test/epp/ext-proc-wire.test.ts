import { describe, expect, it } from 'vitest';
import {
  bodyChunks,
  headersOf,
  immediate,
  MAX_CHUNK_BYTES,
  routedHeaders,
  servedOf,
  subsetOf,
  wireStruct,
} from '../../src/epp/ext-proc-wire.js';

const streamed = (chunk: Record<string, unknown>, arm: string) =>
  (chunk[arm] as { response: { body_mutation: { streamed_response: { body: Buffer; end_of_stream: boolean } } } })
    .response.body_mutation.streamed_response;

describe("Envoy's ext_proc messages as the picker reads and writes them", () => {
  it('cuts a body into chunks of at most 62,000 bytes, the end said on the last only', () => {
    for (const size of [0, 1, MAX_CHUNK_BYTES - 1, MAX_CHUNK_BYTES, MAX_CHUNK_BYTES + 1, 3 * MAX_CHUNK_BYTES + 7]) {
      const body = Buffer.alloc(size, 'x');
      const chunks = bodyChunks('request_body', body, true).map((chunk) => streamed(chunk, 'request_body'));
      expect(chunks.length, `${size} bytes`).toBe(Math.max(1, Math.ceil(size / MAX_CHUNK_BYTES)));
      expect(Buffer.concat(chunks.map((chunk) => chunk.body)).equals(body)).toBe(true);
      expect(chunks.map((chunk) => chunk.end_of_stream)).toEqual(chunks.map((_, i) => i === chunks.length - 1));
      expect(chunks.every((chunk) => chunk.body.length <= MAX_CHUNK_BYTES)).toBe(true);
    }
    // A piece of an answer that is not its last says no end.
    expect(
      bodyChunks('response_body', Buffer.from('abc'), false).map(
        (chunk) => streamed(chunk, 'response_body').end_of_stream,
      ),
    ).toEqual([false]);
  });

  it('reads the subset hint as a list or a comma-separated string, and its absence as any pod', () => {
    const hint = (value: unknown) => ({
      metadata_context: {
        filter_metadata: { 'envoy.lb.subset_hint': wireStruct({ 'x-gateway-destination-endpoint-subset': value }) },
      },
    });
    expect(subsetOf(hint(['10.0.0.1:8000', '10.0.0.2:8000']))).toEqual(['10.0.0.1:8000', '10.0.0.2:8000']);
    expect(subsetOf(hint('10.0.0.1:8000, 10.0.0.2:8000'))).toEqual(['10.0.0.1:8000', '10.0.0.2:8000']);
    expect(subsetOf(hint([]))).toEqual([]);
    expect(subsetOf({})).toBeUndefined();
    expect(
      subsetOf({ metadata_context: { filter_metadata: { 'envoy.lb': wireStruct({ other: 1 }) } } }),
    ).toBeUndefined();
  });

  it("reads the served endpoint from envoy.lb, and Envoy's headers by raw_value (or value), names lower-cased", () => {
    expect(
      servedOf({
        metadata_context: {
          filter_metadata: { 'envoy.lb': wireStruct({ 'x-gateway-destination-endpoint-served': '10.0.0.3:8000' }) },
        },
      }),
    ).toBe('10.0.0.3:8000');
    expect(servedOf({})).toBeUndefined();
    expect(
      headersOf({
        headers: [
          { key: ':path', raw_value: Buffer.from('/v1/completions') },
          { key: 'X-Tenant', value: 'a' },
        ],
      }),
    ).toEqual({
      ':path': '/v1/completions',
      'x-tenant': 'a',
    });
  });

  it('names the destination in the header and the metadata alike, and recomputes the route', () => {
    const answer = routedHeaders('10.0.0.7:8000', { 'x-prefiller-host-port': '10.0.0.5:8000' }, [
      'x-kv-cache-source-host-port',
    ]) as {
      request_headers: {
        response: {
          clear_route_cache: boolean;
          header_mutation: {
            set_headers: Array<{ header: { key: string; raw_value: Buffer } }>;
            remove_headers: string[];
          };
        };
      };
      dynamic_metadata: unknown;
    };
    const { response } = answer.request_headers;
    expect(response.clear_route_cache).toBe(true);
    expect(response.header_mutation.set_headers.map(({ header }) => [header.key, header.raw_value.toString()])).toEqual(
      [
        ['x-gateway-destination-endpoint', '10.0.0.7:8000'],
        ['x-prefiller-host-port', '10.0.0.5:8000'],
      ],
    );
    expect(response.header_mutation.remove_headers).toEqual(['x-kv-cache-source-host-port']);
    expect(answer.dynamic_metadata).toEqual(
      wireStruct({ 'envoy.lb': { 'x-gateway-destination-endpoint': '10.0.0.7:8000' } }),
    );
  });

  it('answers for the client with a status, a JSON body and the reason it was dropped', () => {
    const answer = immediate(429, { error: { message: 'busy' } }, 'rejected-saturated') as {
      immediate_response: {
        status: { code: number };
        body: Buffer;
        headers: { set_headers: Array<{ header: { key: string; raw_value: Buffer } }> };
      };
    };
    expect(answer.immediate_response.status.code).toBe(429);
    expect(JSON.parse(answer.immediate_response.body.toString())).toEqual({ error: { message: 'busy' } });
    expect(
      answer.immediate_response.headers.set_headers.map(
        ({ header }) => `${header.key}: ${header.raw_value.toString()}`,
      ),
    ).toEqual(['content-type: application/json', 'x-llm-d-request-dropped-reason: rejected-saturated']);
  });
});
