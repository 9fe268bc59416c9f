// Envoy's ext_proc messages as the endpoint picker reads and writes them: the fields it uses of
// the vendored protos (proto/, loaded with @grpc/proto-loader's options below: field names as
// in the .proto, oneofs named, bytes as Buffers), and the answers it builds. No gRPC here: the
// server loads grpc-js (src/epp/epp-server.ts).

/** The service and method Envoy calls: a stream of ProcessingRequest each way. */
export const EXT_PROC_SERVICE = 'envoy.service.ext_proc.v3.ExternalProcessor';

/**
 * How @grpc/proto-loader reads the protos for these messages: field names as in the .proto,
 * enums by name, bytes as Buffers, only the fields sent, the name of each oneof's arm given.
 */
export const LOADER_OPTIONS = { keepCase: true, longs: String, enums: String, defaults: false, oneofs: true } as const;

/** The largest body chunk sent back to Envoy (llm-d's: some Envoys cap a chunk at 64 KiB). */
export const MAX_CHUNK_BYTES = 62_000;

/** The header and `envoy.lb` metadata key naming the pod(s) Envoy sends the request to. */
export const DESTINATION_HEADER = 'x-gateway-destination-endpoint';
/** The `envoy.lb` key by which Envoy reports the pod that served (on the response headers). */
export const SERVED_KEY = 'x-gateway-destination-endpoint-served';
/** The gateway's subset hint: where `filter_metadata` lists the pods the request may go to. */
export const SUBSET_NAMESPACE = 'envoy.lb.subset_hint';
export const SUBSET_KEY = 'x-gateway-destination-endpoint-subset';
/** The metadata namespace of the load balancer's keys. */
export const LB_NAMESPACE = 'envoy.lb';
/** Why the picker answered a request itself (llm-d's header and values). */
export const DROPPED_REASON_HEADER = 'x-llm-d-request-dropped-reason';

/** One header of a HeaderMap: Envoy sends and expects `raw_value`. */
export interface WireHeader {
  key: string;
  value?: string;
  raw_value?: Buffer | Uint8Array;
}

/** google.protobuf.Struct as proto-loader gives it (the well-known type's own camelCase names). */
export interface WireStruct {
  fields?: Record<string, WireValue>;
}
export interface WireValue {
  nullValue?: unknown;
  numberValue?: number;
  stringValue?: string;
  boolValue?: boolean;
  structValue?: WireStruct;
  listValue?: { values?: WireValue[] };
  kind?: string;
}

/** What Envoy sends: one arm of `request`, with the route's metadata. */
export interface ProcessingRequest {
  request?:
    | 'request_headers'
    | 'response_headers'
    | 'request_body'
    | 'response_body'
    | 'request_trailers'
    | 'response_trailers';
  request_headers?: { headers?: { headers?: WireHeader[] }; end_of_stream?: boolean };
  response_headers?: { headers?: { headers?: WireHeader[] }; end_of_stream?: boolean };
  request_body?: { body?: Buffer; end_of_stream?: boolean };
  response_body?: { body?: Buffer; end_of_stream?: boolean };
  request_trailers?: { trailers?: { headers?: WireHeader[] } };
  response_trailers?: { trailers?: { headers?: WireHeader[] } };
  metadata_context?: { filter_metadata?: Record<string, WireStruct> };
}

/** What the picker answers: one arm, and the load balancer's metadata with the headers' answer. */
export type ProcessingResponse = Record<string, unknown>;

/** A HeaderMap as a plain record: lower-case names, pseudo-headers (`:path`) included, the last value of a name kept. */
export function headersOf(map: { headers?: WireHeader[] } | undefined): Record<string, string> {
  const headers: Record<string, string> = {};
  for (const header of map?.headers ?? []) {
    const value =
      header.raw_value !== undefined && header.raw_value.length > 0
        ? Buffer.from(header.raw_value).toString('utf8')
        : (header.value ?? '');
    headers[header.key.toLowerCase()] = value;
  }
  return headers;
}

/** A Struct value as plain JSON. */
export function plainOf(value: WireValue | undefined): unknown {
  if (value === undefined) return undefined;
  if (value.stringValue !== undefined) return value.stringValue;
  if (value.numberValue !== undefined) return value.numberValue;
  if (value.boolValue !== undefined) return value.boolValue;
  if (value.structValue !== undefined) return plainStruct(value.structValue);
  if (value.listValue !== undefined) return (value.listValue.values ?? []).map(plainOf);
  return null;
}

/** A Struct as a plain object. */
export function plainStruct(struct: WireStruct | undefined): Record<string, unknown> {
  return Object.fromEntries(Object.entries(struct?.fields ?? {}).map(([key, value]) => [key, plainOf(value)]));
}

/** Plain JSON as a Struct value. */
export function wireValue(value: unknown): WireValue {
  if (typeof value === 'string') return { stringValue: value };
  if (typeof value === 'number') return { numberValue: value };
  if (typeof value === 'boolean') return { boolValue: value };
  if (Array.isArray(value)) return { listValue: { values: value.map(wireValue) } };
  if (value !== null && typeof value === 'object') return { structValue: wireStruct(value as Record<string, unknown>) };
  return { nullValue: 'NULL_VALUE' };
}

/** A plain object as a Struct. */
export function wireStruct(object: Record<string, unknown>): WireStruct {
  return { fields: Object.fromEntries(Object.entries(object).map(([key, value]) => [key, wireValue(value)])) };
}

/**
 * The pods a gateway allows for this request (its subset hint), as `ip:port` strings; undefined
 * when it sent none. A list, or a string of comma-separated entries (lwepp takes both).
 */
export function subsetOf(request: ProcessingRequest): string[] | undefined {
  const hint = request.metadata_context?.filter_metadata?.[SUBSET_NAMESPACE];
  const value = hint?.fields?.[SUBSET_KEY];
  if (value === undefined) return undefined;
  const plain = plainOf(value);
  const entries = Array.isArray(plain) ? plain : typeof plain === 'string' ? plain.split(',') : [];
  return entries
    .filter((entry): entry is string => typeof entry === 'string')
    .map((entry) => entry.trim())
    .filter((entry) => entry !== '');
}

/** The pod Envoy says served the request (on the response headers), if it said. */
export function servedOf(request: ProcessingRequest): string | undefined {
  const lb = request.metadata_context?.filter_metadata?.[LB_NAMESPACE];
  const served = plainOf(lb?.fields?.[SERVED_KEY]);
  return typeof served === 'string' && served !== '' ? served : undefined;
}

/** Header options that replace what the request had (Envoy's OVERWRITE_IF_EXISTS_OR_ADD). */
function setHeaders(headers: Record<string, string>): Array<Record<string, unknown>> {
  return Object.entries(headers).map(([key, value]) => ({
    header: { key, raw_value: Buffer.from(value, 'utf8') },
    append_action: 'OVERWRITE_IF_EXISTS_OR_ADD',
  }));
}

/**
 * The answer to the request's headers once the picker has chosen: the route recomputed (so that
 * Envoy's original-destination cluster reads the new header), `set` and `remove` applied, and
 * the destination in the load balancer's metadata as well (the header and the metadata must
 * match).
 */
export function routedHeaders(
  destination: string,
  set: Record<string, string>,
  remove: readonly string[],
): ProcessingResponse {
  return {
    request_headers: {
      response: {
        status: 'CONTINUE',
        clear_route_cache: true,
        header_mutation: {
          set_headers: setHeaders({ [DESTINATION_HEADER]: destination, ...set }),
          remove_headers: [...remove],
        },
      },
    },
    dynamic_metadata: wireStruct({ [LB_NAMESPACE]: { [DESTINATION_HEADER]: destination } }),
  };
}

/**
 * `body` streamed back as the request's (`'request_body'`) or the response's body: chunks of
 * at most {@link MAX_CHUNK_BYTES}, `end_of_stream` on the last when `end` (an empty body is one
 * empty chunk, so that the end is still said).
 */
export function bodyChunks(arm: 'request_body' | 'response_body', body: Buffer, end: boolean): ProcessingResponse[] {
  const chunks: ProcessingResponse[] = [];
  for (let offset = 0; offset < body.length || (offset === 0 && chunks.length === 0); offset += MAX_CHUNK_BYTES) {
    const piece = body.subarray(offset, offset + MAX_CHUNK_BYTES);
    const last = offset + MAX_CHUNK_BYTES >= body.length;
    chunks.push({
      [arm]: {
        response: {
          status: 'CONTINUE',
          body_mutation: { streamed_response: { body: piece, end_of_stream: end && last } },
        },
      },
    });
    if (body.length === 0) break;
  }
  return chunks;
}

/** The plain answer to headers or trailers that the picker lets through unchanged. */
export function passOn(arm: 'response_headers' | 'request_headers'): ProcessingResponse {
  return { [arm]: { response: { status: 'CONTINUE' } } };
}

/** The answer to trailers: nothing to change. */
export function trailersPassed(arm: 'request_trailers' | 'response_trailers'): ProcessingResponse {
  return { [arm]: {} };
}

/**
 * The picker's own answer to the client, instead of routing: `status` with a JSON body, its
 * content type, and the reason a dropped request was dropped (llm-d's header).
 */
export function immediate(
  status: number,
  body: unknown,
  reason: string | undefined,
  extra: Readonly<Record<string, string>> = {},
): ProcessingResponse {
  const headers: Record<string, string> = { ...extra, 'content-type': 'application/json' };
  if (reason !== undefined) headers[DROPPED_REASON_HEADER] = reason;
  return {
    immediate_response: {
      status: { code: status },
      headers: { set_headers: setHeaders(headers) },
      body: Buffer.from(JSON.stringify(body), 'utf8'),
      details: reason ?? `status_${status}`,
    },
  };
}
