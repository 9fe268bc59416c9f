// What a fake worker refuses and how it breaks: the engines' checks of a body (a field the route
// cannot do without, the length budget's type, the context length), the error chunk of a 200
// stream, and the injected faults that cut a stream short. Apart from the HTTP dispatch so that
// a new check or fault is read in one place.
import type { ServerResponse } from 'node:http';
import type { AnswerShape } from '../endpoints/endpoint.js';
import { endpointAt } from '../fakes/fake-formats.js';
import { promptTokens } from '../fakes/fake-plan.js';
import type { FakeRequest, FakeWorkerOptions, Fault } from '../fakes/fake-types.js';

/** A refusal: the HTTP status and the message of its OpenAI-style error. */
export interface Refusal {
  status: number;
  message: string;
}

/** The fault of one request: the worker's, or what its fault function chooses for this request. */
export function faultFor(fault: FakeWorkerOptions['fault'], record: FakeRequest): Fault | undefined {
  return typeof fault === 'function' ? fault(record) : fault;
}

/**
 * The field a route cannot do without, missing: vLLM and SGLang refuse such a body with a 400
 * as their request models are read (`Field required`), before any generation.
 */
export function requiredField(path: string, body: Record<string, unknown>): string | undefined {
  const shape = endpointAt(path)?.answer;
  if (shape === 'text' && body.prompt === undefined) return 'prompt: Field required';
  if (shape === 'chat' && body.messages === undefined) return 'messages: Field required';
  if (shape === 'responses' && body.input === undefined) return 'input: Field required';
  if (shape === 'messages') {
    // Anthropic's request model: all three required (a pydantic 400, in OpenAI's shape).
    const missing = ['messages', 'max_tokens', 'model'].find((field) => body[field] === undefined);
    if (missing !== undefined) return `${missing}: Field required`;
  }
  return undefined;
}

/** The length budget a body names, by route: the field and its value (SGLang's `/generate` has none read here). */
function budgetOf(path: string, body: Record<string, unknown>): [string, unknown] {
  const shape = endpointAt(path)?.answer;
  if (shape === 'generate') return ['max_tokens', undefined];
  if (shape === 'responses') return ['max_output_tokens', body.max_output_tokens];
  if (shape === 'messages') return ['max_tokens', body.max_tokens];
  const field =
    body.max_completion_tokens !== undefined && body.max_completion_tokens !== null
      ? 'max_completion_tokens'
      : 'max_tokens';
  return [field, body[field]];
}

/** vLLM's check of the length budget's type, as the body is read: an integer of at least 1. */
export function refuseBudget(path: string, body: Record<string, unknown>): string | undefined {
  const [field, budget] = budgetOf(path, body);
  if (budget === undefined || budget === null) return undefined;
  if (typeof budget !== 'number' || !Number.isInteger(budget) || budget < 1) {
    return `${field} must be an integer of at least 1, got ${JSON.stringify(budget)}`;
  }
  return undefined;
}

/**
 * vLLM's check, in its request handler, that the prompt and the budget fit the context
 * (`maxModelLen`, 4,096 by default): a 400.
 */
export function refuseContext(
  path: string,
  body: Record<string, unknown>,
  maxModelLen: number | undefined,
): Refusal | undefined {
  const [, budget] = budgetOf(path, body);
  if (typeof budget !== 'number') return undefined;
  const context = maxModelLen ?? 4096;
  const prompt = promptTokens(body);
  if (prompt + budget <= context) return undefined;
  return {
    status: 400,
    message: `This model's maximum context length is ${context} tokens. However, you requested ${prompt + budget} tokens (${prompt} in the messages, ${budget} in the completion). Please reduce the length of the messages or completion.`,
  };
}

/** vLLM's error chunk inside a 200 stream. */
export function errorChunk(code: number, message: string) {
  const type = code >= 500 ? 'InternalServerError' : 'BadRequestError';
  return { error: { object: 'error', message, type, param: null, code } };
}

/** Whether answers of `shape` are typed SSE events (`event:` and `data:`, no `[DONE]`): Responses, Messages. */
export const typedEvents = (shape: AnswerShape): boolean => shape === 'responses' || shape === 'messages';

/** One typed event on the wire: its `event:` line is its `type`. */
export const typedEvent = (chunk: object, json: string): string =>
  `event: ${String((chunk as { type?: unknown }).type)}\ndata: ${json}\n\n`;

/**
 * What ends a typed stream whose generation failed part way, as vLLM's serving layer: on
 * Messages an Anthropic `error` event (always `internal_error`; vLLM's message is the
 * validation text of the chunk it failed to parse, the fake's is the failure's own), and no
 * `message_stop`; on Responses nothing (vLLM has no event for it: the body just ends, with no
 * `response.completed`).
 */
export function typedFailure(shape: AnswerShape, message: string): string {
  if (shape !== 'messages') return '';
  const error = { type: 'error', error: { type: 'internal_error', message } };
  return typedEvent(error, JSON.stringify(error));
}

/** The faults that break a stream once it has sent some tokens. */
export type BreakingFault = Extract<Fault, { type: 'error-event' | 'reset' | 'stall' }>;

/** `fault` when it breaks a stream part way, else undefined. */
export function breakingFault(fault: Fault | undefined): BreakingFault | undefined {
  return fault?.type === 'error-event' || fault?.type === 'reset' || fault?.type === 'stall' ? fault : undefined;
}

/**
 * Breaks a stream as `fault` says: `stall` says nothing more, `reset` destroys the connection
 * once what was written has left (after `pause(20)`, a timer the worker clears when it closes),
 * `error-event` ends it with an SSE `error` event: in the shape of the stream's API when it is
 * a typed one (`typed`: its shape, and how many events were sent, Responses' next sequence
 * number).
 */
export function breakStream(
  res: ServerResponse,
  fault: BreakingFault,
  pause: (ms: number) => Promise<void>,
  typed?: { shape: AnswerShape; sent: number },
): void {
  // Wedged: nothing more, until the caller gives up and closes the connection.
  if (fault.type === 'stall') return;
  if (fault.type === 'reset') {
    // Once what was written has left, so that the client sees the tokens, then the break.
    void pause(20).then(() => res.destroy());
    return;
  }
  const message = fault.message ?? 'injected failure mid-stream';
  if (typed?.shape === 'messages') {
    res.end(typedFailure('messages', message));
    return;
  }
  if (typed?.shape === 'responses') {
    // OpenAI's error event of a Responses stream (vLLM itself sends none).
    const error = { type: 'error', code: 'server_error', message, param: null, sequence_number: typed.sent };
    res.end(typedEvent(error, JSON.stringify(error)));
    return;
  }
  res.write(
    `event: error\ndata: ${JSON.stringify({ error: { message, type: 'InternalServerError', code: 500 } })}\n\n`,
  );
  res.end();
}
