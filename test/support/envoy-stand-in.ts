// A scripted stand-in for Envoy's ext_proc filter (no Envoy binary installs here): a gRPC client
// of the picker that sends what Envoy 1.33 sends in FULL_DUPLEX_STREAMED mode, in its order
// (request headers, body chunks without waiting, trailers; the answer's headers with the served
// endpoint, its body chunks), and a gateway that applies the picker's answer and sends the
// request to the pod it names.
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { request as httpRequest } from 'undici';
import EXT_PROC_DESCRIPTOR from '../../src/epp/ext-proc-descriptor.json' with { type: 'json' };
import { LOADER_OPTIONS, type ProcessingRequest, wireStruct } from '../../src/epp/ext-proc-wire.js';

// biome-ignore lint/suspicious/noExplicitAny: Envoy's messages as the loader gives them, read field by field
export type Message = Record<string, any>;

const definition = protoLoader.fromJSON(
  EXT_PROC_DESCRIPTOR as Parameters<typeof protoLoader.fromJSON>[0],
  LOADER_OPTIONS,
);
const Client = (grpc.loadPackageDefinition(definition) as Message).envoy.service.ext_proc.v3.ExternalProcessor;

/** One ext_proc stream, as Envoy holds it: send messages, read the picker's answers in order. */
export interface ExtProcCall {
  send(message: Message): void;
  /** The next answer; rejects if the stream ends first. */
  next(): Promise<Message>;
  /** Envoy's half-close (the request's answer is over). */
  end(): void;
  /** Envoy gives the stream up (the client left, a timeout). */
  cancel(): void;
  /** Settles when the stream is over (the picker ended its side, or it broke). */
  readonly closed: Promise<void>;
}

/** A client of the picker's ext_proc port (`options`: the gRPC channel's, for a test that needs its own). */
export function envoyStandIn(port: number, options: grpc.ChannelOptions = {}) {
  const client = new Client(`127.0.0.1:${port}`, grpc.credentials.createInsecure(), options);
  return {
    open(): ExtProcCall {
      const call = client.Process();
      const answers: Message[] = [];
      const waiting: Array<{ resolve: (m: Message) => void; reject: (e: Error) => void }> = [];
      let over: Error | undefined;
      call.on('data', (message: Message) => {
        const waiter = waiting.shift();
        if (waiter !== undefined) waiter.resolve(message);
        else answers.push(message);
      });
      const closed = new Promise<void>((resolve) => {
        const finish = (error?: Error) => {
          over ??= error ?? new Error('the stream ended');
          for (const waiter of waiting.splice(0)) waiter.reject(over);
          resolve();
        };
        call.on('end', () => finish());
        call.on('error', (error: Error) => finish(error));
      });
      return {
        send: (message) => call.write(message),
        next: () => {
          const answer = answers.shift();
          if (answer !== undefined) return Promise.resolve(answer);
          if (over !== undefined) return Promise.reject(over);
          return new Promise((resolve, reject) => waiting.push({ resolve, reject }));
        },
        end: () => call.end(),
        cancel: () => call.cancel(),
        closed,
      };
    },
    close: () => client.close(),
  };
}

const header = (key: string, value: string) => ({ key, raw_value: Buffer.from(value) });

/** Envoy's request headers: pseudo-headers first, then the request's own; the subset hint in the metadata. */
export function requestHeaders(
  path: string,
  headers: Record<string, string> = {},
  options: { endOfStream?: boolean; subset?: string[] | string; method?: string } = {},
): ProcessingRequest & Message {
  const all = {
    ':method': options.method ?? 'POST',
    ':path': path,
    ':authority': 'gateway.example',
    ':scheme': 'http',
    'content-type': 'application/json',
    ...headers,
  };
  return {
    request_headers: {
      headers: { headers: Object.entries(all).map(([k, v]) => header(k, v)) },
      end_of_stream: options.endOfStream ?? false,
    },
    ...(options.subset === undefined
      ? {}
      : {
          metadata_context: {
            filter_metadata: {
              'envoy.lb.subset_hint': wireStruct({ 'x-gateway-destination-endpoint-subset': options.subset }),
            },
          },
        }),
  };
}

/** A request body chunk. */
export const requestBody = (body: Buffer | string, endOfStream: boolean): Message => ({
  request_body: { body: Buffer.from(body), end_of_stream: endOfStream },
});

/** The answer's headers, with the endpoint Envoy says served (in `envoy.lb`). */
export function responseHeaders(
  status: number,
  served: string | undefined,
  headers: Record<string, string> = {},
): Message {
  return {
    response_headers: {
      headers: { headers: Object.entries({ ':status': String(status), ...headers }).map(([k, v]) => header(k, v)) },
    },
    ...(served === undefined
      ? {}
      : {
          metadata_context: {
            filter_metadata: { 'envoy.lb': wireStruct({ 'x-gateway-destination-endpoint-served': served }) },
          },
        }),
  };
}

/** An answer body chunk. */
export const responseBody = (body: Buffer | string, endOfStream: boolean): Message => ({
  response_body: { body: Buffer.from(body), end_of_stream: endOfStream },
});

/** A header of a mutation's set list, as text. */
export function setHeader(mutation: Message | undefined, name: string): string | undefined {
  const found = (mutation?.set_headers ?? []).find((option: Message) => option.header.key === name);
  return found === undefined ? undefined : Buffer.from(found.header.raw_value).toString();
}

/** The `envoy.lb` destination of an answer's dynamic metadata. */
export function lbDestination(answer: Message): string | undefined {
  return answer.dynamic_metadata?.fields?.['envoy.lb']?.structValue?.fields?.['x-gateway-destination-endpoint']
    ?.stringValue;
}

/**
 * The whole of one request as a gateway with the picker runs it: headers and `chunks` sent
 * without waiting, the picker's answers read (headers, then the body streamed back), the body
 * sent to the pod the picker named with its header mutation applied, and the pod's answer fed
 * back through the stream in `answerChunkBytes` pieces; resolves with what the client would get.
 */
export async function throughGateway(
  envoy: ReturnType<typeof envoyStandIn>,
  path: string,
  body: string,
  options: { headers?: Record<string, string>; served?: (destination: string) => string; chunkBytes?: number } = {},
) {
  const call = envoy.open();
  call.send(requestHeaders(path, options.headers));
  const bytes = Buffer.from(body);
  const size = options.chunkBytes ?? 16_384;
  for (let at = 0; at < bytes.length; at += size)
    call.send(requestBody(bytes.subarray(at, at + size), at + size >= bytes.length));
  const first = await call.next();
  if (first.immediate_response !== undefined) {
    call.end();
    await call.closed;
    return { immediate: first.immediate_response as Message };
  }
  const mutation = first.request_headers.response.header_mutation;
  const destination = setHeader(mutation, 'x-gateway-destination-endpoint') as string;
  let echoed = Buffer.alloc(0);
  for (;;) {
    const chunk = (await call.next()).request_body.response.body_mutation.streamed_response;
    echoed = Buffer.concat([echoed, Buffer.from(chunk.body ?? [])]);
    if (chunk.end_of_stream === true) break;
  }
  const sent: Record<string, string> = { 'content-type': 'application/json', ...options.headers };
  for (const name of mutation.remove_headers ?? []) delete sent[name];
  for (const option of mutation.set_headers ?? [])
    sent[option.header.key] = Buffer.from(option.header.raw_value).toString();
  delete sent['x-gateway-destination-endpoint'];
  delete sent['content-length'];
  const answer = await httpRequest(`http://${destination}${path}`, { method: 'POST', headers: sent, body: echoed });
  const served = options.served?.(destination) ?? destination;
  call.send(responseHeaders(answer.statusCode, served, { 'content-type': String(answer.headers['content-type']) }));
  expectAnswer(await call.next(), 'response_headers');
  let text = '';
  for await (const piece of answer.body) {
    call.send(responseBody(piece as Buffer, false));
    text += Buffer.from(
      (await call.next()).response_body.response.body_mutation.streamed_response.body ?? [],
    ).toString();
  }
  call.send(responseBody(Buffer.alloc(0), true));
  await call.next();
  call.end();
  await call.closed;
  return {
    first,
    destination,
    prefiller: setHeader(mutation, 'x-prefiller-host-port'),
    echoed,
    status: answer.statusCode,
    text,
  };
}

function expectAnswer(answer: Message, arm: string): void {
  if (answer[arm] === undefined) throw new Error(`expected a ${arm} answer, got ${JSON.stringify(answer)}`);
}
