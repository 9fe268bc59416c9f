// One Envoy ext_proc stream (one HTTP request through the gateway) in FULL_DUPLEX_STREAMED
// mode, as a phase and one transition per message: the request's headers and body are held
// until the body ends, the picker decides, the headers are answered with the destination and
// the body streamed back; then the answer's headers and body pass through, the served pod and
// the usage read on the way, and the leases are given back when it ends or the stream breaks.
import type { Logger } from '../runtime/logger.js';
import { BodyBuffer } from './body-buffer.js';
import type { Pick, PickedAnswer, PickRequest } from './endpoint-picker.js';
import {
  bodyChunks,
  headersOf,
  immediate,
  type ProcessingRequest,
  type ProcessingResponse,
  passOn,
  routedHeaders,
  servedOf,
  subsetOf,
  trailersPassed,
} from './ext-proc-wire.js';

/** Where a stream is. */
type Phase =
  | { readonly kind: 'headers' }
  | {
      readonly kind: 'body';
      readonly headers: Record<string, string>;
      readonly subset: string[] | undefined;
      readonly body: BodyBuffer;
    }
  /**
   * The picker is deciding; request trailers that came meanwhile are answered after the body.
   * `dropping`: the body went past the limit, and the rest of it is neither held nor answered.
   */
  | { readonly kind: 'picking'; trailers: boolean; readonly dropping: boolean }
  /** Routed: the answer's messages pass through. `tail` holds its last bytes, for its usage. */
  | { readonly kind: 'routed'; readonly answer: PickedAnswer; tail: string }
  /** Answered by the picker itself, or over: whatever else comes is not answered. */
  | { readonly kind: 'done' };

/** How much of an answer's end is kept to read its usage from (the last SSE events, or a whole body's tail). */
const TAIL_CHARS = 16_384;

/** What a stream needs of its server. */
export interface StreamHost {
  pick(request: PickRequest): Promise<Pick>;
  /** One decision made (for the metrics). */
  picked(pick: Pick): void;
  /** Envoy reported another pod than the one picked. */
  servedElsewhere(): void;
  readonly maxBodyBytes: number;
  readonly logger: Logger;
}

/**
 * One ext_proc stream: {@link receive} each message Envoy sends, in order; `send` gets the
 * answers, in the order Envoy expects them; {@link end} when the stream ends, however it ends
 * (the leases of a request still under way are given back then).
 *
 * @example
 * const stream = new ExtProcStream(host, (response) => call.write(response));
 * call.on('data', (message) => stream.receive(message));
 * call.on('end', () => stream.end());
 */
export class ExtProcStream {
  #phase: Phase = { kind: 'headers' };
  #ended = false;
  #gaveUp: () => void = () => {};
  readonly #gaveUpPromise = new Promise<void>((resolve) => {
    this.#gaveUp = resolve;
  });

  constructor(
    private readonly host: StreamHost,
    private readonly send: (response: ProcessingResponse) => void,
  ) {}

  /** The one transition: a message of Envoy's in the current phase. */
  receive(message: ProcessingRequest): void {
    const phase = this.#phase;
    const arm = message.request ?? armOf(message);
    switch (arm) {
      case 'request_headers': {
        if (phase.kind !== 'headers') {
          this.#outOfOrder(arm, phase);
          return;
        }
        const headers = headersOf(message.request_headers?.headers);
        const subset = subsetOf(message);
        if (message.request_headers?.end_of_stream === true) {
          this.#decide({ headers, subset, body: Buffer.alloc(0) }, false);
        } else {
          const length = headers['content-length'];
          const expected = length !== undefined && /^\d{1,15}$/.test(length) ? Number(length) : undefined;
          this.#phase = { kind: 'body', headers, subset, body: new BodyBuffer(this.host.maxBodyBytes, expected) };
        }
        return;
      }
      case 'request_body': {
        if (phase.kind !== 'body') {
          if (phase.kind !== 'picking' || !phase.dropping) this.#outOfOrder(arm, phase);
          return;
        }
        // Past the limit: answered at once (a 413), as Envoy allows for any body chunk, so that
        // a body too large is never held whole, however long its sender takes to end it.
        if (!phase.body.append(message.request_body?.body ?? Buffer.alloc(0))) {
          this.#decide({ headers: phase.headers, subset: phase.subset, body: Buffer.alloc(0), oversized: true }, false);
          return;
        }
        if (message.request_body?.end_of_stream === true) this.#endBody(phase, false);
        return;
      }
      case 'request_trailers': {
        // Trailers end a body that did not say so itself.
        if (phase.kind === 'body') {
          this.#endBody(phase, true);
          return;
        }
        if (phase.kind === 'picking') phase.trailers = true;
        else if (phase.kind === 'routed') this.send(trailersPassed('request_trailers'));
        return;
      }
      case 'response_headers': {
        if (phase.kind !== 'routed') {
          this.#outOfOrder(arm, phase);
          return;
        }
        const served = servedOf(message);
        if (served !== undefined) phase.answer.served(served);
        const status = Number(headersOf(message.response_headers?.headers)[':status'] ?? 200);
        phase.answer.responded(status);
        this.send(passOn('response_headers'));
        if (message.response_headers?.end_of_stream === true) this.#finish('complete');
        return;
      }
      case 'response_body': {
        if (phase.kind !== 'routed') {
          this.#outOfOrder(arm, phase);
          return;
        }
        const body = message.response_body?.body ?? Buffer.alloc(0);
        const end = message.response_body?.end_of_stream === true;
        phase.tail = (phase.tail + body.toString('utf8')).slice(-TAIL_CHARS);
        for (const chunk of bodyChunks('response_body', body, end)) this.send(chunk);
        if (end) this.#finish('complete');
        return;
      }
      case 'response_trailers': {
        if (phase.kind !== 'routed' && phase.kind !== 'done') {
          this.#outOfOrder(arm, phase);
          return;
        }
        this.send(trailersPassed('response_trailers'));
        if (phase.kind === 'routed') this.#finish('complete');
        return;
      }
      default:
        return;
    }
  }

  /** Request body bytes this stream holds now: those read of a body still coming. */
  get bodyBytes(): number {
    return this.#phase.kind === 'body' ? this.#phase.body.size : 0;
  }

  /** The stream ended (Envoy closed it, cancelled it, or it broke): a request under way ends with it. */
  end(): void {
    if (this.#ended) return;
    this.#ended = true;
    this.#gaveUp();
    if (this.#phase.kind === 'routed') this.#finish('broken');
    else if (this.#phase.kind !== 'picking') this.#phase = { kind: 'done' };
  }

  #endBody(phase: Extract<Phase, { kind: 'body' }>, trailers: boolean): void {
    this.#decide({ headers: phase.headers, subset: phase.subset, body: phase.body.bytes() }, trailers);
  }

  #decide(request: Omit<PickRequest, 'gaveUp'>, trailers: boolean): void {
    const phase: Extract<Phase, { kind: 'picking' }> = {
      kind: 'picking',
      trailers,
      dropping: request.oversized === true,
    };
    this.#phase = phase;
    this.host
      .pick({ ...request, gaveUp: this.#gaveUpPromise })
      .catch((error: unknown): Pick => {
        this.host.logger.error({ err: error }, 'The endpoint picker failed to decide');
        return {
          kind: 'refused',
          status: 500,
          reason: undefined,
          body: { error: { message: 'The endpoint picker failed', type: 'internal_error', code: 500, param: null } },
        };
      })
      .then((pick) => this.#picked(pick, request.body, phase.trailers));
  }

  #picked(pick: Pick, body: Buffer, trailers: boolean): void {
    this.host.picked(pick);
    if (pick.kind === 'refused') {
      this.#phase = { kind: 'done' };
      if (!this.#ended) this.send(immediate(pick.status, pick.body, pick.reason, pick.headers));
      return;
    }
    const answer: PickedAnswer = {
      ...pick.answer,
      served: (endpoint) => {
        if (endpoint !== pick.destination) this.host.servedElsewhere();
        pick.answer.served(endpoint);
      },
    };
    this.#phase = { kind: 'routed', answer, tail: '' };
    // Envoy gave the request up while the picker decided: nothing is sent, the leases go back.
    if (this.#ended) {
      this.#finish('broken');
      return;
    }
    // The body the picker changed (a rewrite rule's model), else the client's as it came.
    const sent = pick.body ?? body;
    const set = { ...pick.set, 'content-length': String(sent.length) };
    this.send(routedHeaders(pick.destination, set, pick.remove));
    for (const chunk of bodyChunks('request_body', sent, true)) this.send(chunk);
    if (trailers) this.send(trailersPassed('request_trailers'));
  }

  #finish(end: 'complete' | 'broken'): void {
    const phase = this.#phase;
    if (phase.kind !== 'routed') return;
    this.#phase = { kind: 'done' };
    phase.answer.finished(end, usageIn(phase.tail));
  }

  /** A message out of Envoy's order (a bug of the gateway's, or of this picker's): logged, not answered; after the end, nothing. */
  #outOfOrder(arm: string, phase: Phase): void {
    if (phase.kind === 'done') return;
    this.host.logger.warn(
      { message: arm, phase: phase.kind },
      'Envoy sent an ext_proc message out of order; it is not answered',
    );
  }
}

/** The arm of a message whose `request` oneof name the loader did not give. */
function armOf(message: ProcessingRequest): ProcessingRequest['request'] {
  for (const arm of [
    'request_headers',
    'request_body',
    'request_trailers',
    'response_headers',
    'response_body',
    'response_trailers',
  ] as const) {
    if (message[arm] !== undefined && message[arm] !== null) return arm;
  }
  return undefined;
}

/**
 * The tokens an answer says it used, from its last bytes: OpenAI's `prompt_tokens` and
 * `completion_tokens`, or the agents' APIs' `input_tokens` and `output_tokens`, of its last
 * `usage` object; undefined when it says none.
 *
 * @example usageIn('data: {"usage":{"prompt_tokens":5,"completion_tokens":3}}\n\ndata: [DONE]\n\n'); // { promptTokens: 5, completionTokens: 3 }
 */
export function usageIn(tail: string): { promptTokens: number; completionTokens: number } | undefined {
  const at = tail.lastIndexOf('"usage"');
  if (at === -1) return undefined;
  const after = tail.slice(at);
  const prompt = /"(?:prompt_tokens|input_tokens)"\s*:\s*(\d+)/.exec(after);
  const completion = /"(?:completion_tokens|output_tokens)"\s*:\s*(\d+)/.exec(after);
  if (prompt === null && completion === null) return undefined;
  return { promptTokens: Number(prompt?.[1] ?? 0), completionTokens: Number(completion?.[1] ?? 0) };
}
