import { describe, expect, it } from 'vitest';
// @ts-expect-error: a script of the repository's, plain JavaScript without types.
import { extProcDescriptor } from '../../scripts/ext-proc-json.mjs';
import EXT_PROC_DESCRIPTOR from '../../src/epp/ext-proc-descriptor.json' with { type: 'json' };

describe('the ext_proc descriptor the picker loads', () => {
  it('is the vendored protos under proto/, as scripts/ext-proc-descriptor.mjs writes it (run it after changing them)', () => {
    expect(EXT_PROC_DESCRIPTOR).toEqual(JSON.parse(JSON.stringify(extProcDescriptor())));
  });

  it("keeps Envoy's field numbers where the picker reads and writes", () => {
    // biome-ignore lint/suspicious/noExplicitAny: the descriptor's nested JSON, read by name
    const v3 = (EXT_PROC_DESCRIPTOR as any).nested.envoy.nested.service.nested.ext_proc.nested.v3.nested;
    const ids = (message: string) =>
      Object.fromEntries(
        Object.entries(v3[message].fields as Record<string, { id: number }>).map(([name, field]) => [name, field.id]),
      );
    expect(ids('ProcessingRequest')).toMatchObject({
      request_headers: 2,
      response_headers: 3,
      request_body: 4,
      response_body: 5,
      request_trailers: 6,
      response_trailers: 7,
      metadata_context: 8,
    });
    expect(ids('ProcessingResponse')).toMatchObject({
      request_headers: 1,
      response_headers: 2,
      request_body: 3,
      response_body: 4,
      request_trailers: 5,
      response_trailers: 6,
      immediate_response: 7,
      dynamic_metadata: 8,
    });
    expect(ids('CommonResponse')).toEqual({
      status: 1,
      header_mutation: 2,
      body_mutation: 3,
      trailers: 4,
      clear_route_cache: 5,
    });
    expect(ids('BodyMutation')).toEqual({ body: 1, clear_body: 2, streamed_response: 3 });
    expect(ids('StreamedBodyResponse')).toMatchObject({ body: 1, end_of_stream: 2 });
  });
});
