// The answers of the fake workers, one format per endpoint the router serves: the table below
// is keyed by the endpoints' registry (`src/endpoints/registry.ts`), so that an endpoint added
// there without its fake format does not compile. A new endpoint is one module in `formats/`
// and one entry here; the route a request came in on says which format answers it.
import { randomUUID } from 'node:crypto';
import type { ServerResponse } from 'node:http';
import type { Endpoint, EndpointBody } from '../endpoints/endpoint.js';
import { ENDPOINTS } from '../endpoints/registry.js';
import { type Engine, type FakeAnswer, planAnswer, promptTokens, usageOf } from './fake-plan.js';
import type { WorkerSide } from './fake-protocol.js';
import { chatFormat } from './formats/chat.js';
import { completionFormat } from './formats/completions.js';
import type { Format, FormatOf } from './formats/format.js';
import { generateFormat } from './formats/generate.js';
import { countTokensAnswer, messagesFormat } from './formats/messages.js';
import {
  classifyAnswer,
  detokenizeAnswer,
  embeddingsAnswer,
  type PoolingAnswer,
  poolingDataAnswer,
  rerankAnswer,
  scoreAnswer,
  tokenizeAnswer,
} from './formats/pooling.js';
import { responsesFormat } from './formats/responses.js';

export type { Format } from './formats/format.js';
export type { PoolingAnswer } from './formats/pooling.js';

/**
 * How a fake worker answers one endpoint: a generation's JSON shapes over a planned answer
 * (`disaggregated`), or a passthrough's whole answer computed from the body (`passthrough`).
 */
export type FakeFormat =
  | { readonly serving: 'disaggregated'; readonly format: FormatOf }
  | { readonly serving: 'passthrough'; answer(body: EndpointBody, model: string): PoolingAnswer };

type Registered = (typeof ENDPOINTS)[number];

/**
 * The fakes' answer table: one entry per endpoint of the registry, of the serving the endpoint
 * declares, so that an endpoint added without its fake format does not compile.
 *
 * @internal
 */
export type FakeFormats = {
  readonly [E in Registered as E['name']]: Extract<FakeFormat, { serving: E['serving'] }>;
};

const FORMATS: FakeFormats = {
  completions: { serving: 'disaggregated', format: completionFormat },
  chat: { serving: 'disaggregated', format: chatFormat },
  generate: { serving: 'disaggregated', format: (id) => generateFormat(id) },
  responses: { serving: 'disaggregated', format: responsesFormat },
  messages: { serving: 'disaggregated', format: messagesFormat },
  embeddings: { serving: 'passthrough', answer: embeddingsAnswer },
  rerank: { serving: 'passthrough', answer: rerankAnswer },
  score: { serving: 'passthrough', answer: scoreAnswer },
  classify: { serving: 'passthrough', answer: classifyAnswer },
  pooling: { serving: 'passthrough', answer: poolingDataAnswer },
  count_tokens: { serving: 'passthrough', answer: countTokensAnswer },
  tokenize: { serving: 'passthrough', answer: tokenizeAnswer },
  detokenize: { serving: 'passthrough', answer: detokenizeAnswer },
};

const AT_PATH: ReadonlyMap<string, Registered> = new Map(ENDPOINTS.map((endpoint) => [endpoint.path, endpoint]));

/** The endpoint served at `path` (the same path on the router and on the workers), if any. */
export function endpointAt(path: string): Endpoint | undefined {
  return AT_PATH.get(path);
}

/** How a fake worker answers the endpoint at `path`; undefined for a path no endpoint has. */
export function fakeFormatAt(path: string): FakeFormat | undefined {
  const endpoint = AT_PATH.get(path);
  return endpoint === undefined ? undefined : FORMATS[endpoint.name];
}

/**
 * The JSON shapes of the answers of the generation endpoint at `path` (OpenAI completions, chat
 * completions, SGLang's /generate, OpenAI Responses, Anthropic Messages); completions' for a
 * path that is no generation endpoint.
 */
export function formatFor(path: string, model = 'fake-model'): Format {
  const found = fakeFormatAt(path);
  const format = found?.serving === 'disaggregated' ? found.format : completionFormat;
  return format(`fake-${randomUUID()}`, Math.floor(Date.now() / 1000), model);
}

/** The shape of the answers at `path`: its endpoint's, completions' (`text`) for a path no endpoint has. */
export function answerShapeAt(path: string): Endpoint['answer'] {
  return AT_PATH.get(path)?.answer ?? 'text';
}

/** The answer of the passthrough (pooling) endpoint at `path`, or undefined when `path` is none. */
export function poolingAnswer(path: string, body: EndpointBody, model: string): PoolingAnswer | undefined {
  const found = fakeFormatAt(path);
  return found?.serving === 'passthrough' ? found.answer(body, model) : undefined;
}

/**
 * The paths of the passthrough APIs a fake worker answers whole: the pooling ones (vLLM serves
 * them with a pooling model), Anthropic's `count_tokens`, `/tokenize` and `/detokenize`.
 */
export const POOLING_PATHS: readonly string[] = ENDPOINTS.filter((each) => each.serving === 'passthrough').map(
  (each) => each.path,
);

/**
 * The one-token answer of a prefill call, in the shape of its route (with `cachedTokens` of
 * its prompt cached: half of it when not given); `abort` (a prefill the engine dropped) or `stop` (its one token ended the
 * answer) when the answer it was given says so. Capped by its length, a Responses answer is
 * `incomplete` (`max_output_tokens`) and a Messages one stops at `max_tokens`.
 */
export function oneTokenAnswer(
  record: { path: string; body: Record<string, unknown> },
  model: string | undefined,
  answer?: FakeAnswer,
  cachedTokens?: number,
  engine: Engine = { name: 'vllm' },
) {
  const prompt = promptTokens(record.body);
  // A prefill whose one token ends the answer (an end of sequence) says so; otherwise `length`.
  const finishReason =
    answer?.finishReason === 'abort' || answer?.finishReason === 'stop' ? answer.finishReason : 'length';
  const shape = answerShapeAt(record.path);
  // One token under every name a route reads its cap by (Responses echoes its own).
  const capped = shape === 'responses' ? { max_output_tokens: 1 } : {};
  const plan = planAnswer(
    { ...record.body, n: 1, max_tokens: 1, ...capped },
    { content: ['tok0 '], finishReason },
    1,
    engine,
    shape,
  );
  return formatFor(record.path, model).whole(plan, usageOf(record.body, 1, cachedTokens ?? Math.floor(prompt / 2)));
}

/** vLLM's error `type` names by status, which its Anthropic layer passes on unchanged. */
function vllmErrorType(status: number): string {
  if (status === 404) return 'NotFoundError';
  return status >= 500 ? 'InternalServerError' : 'BadRequestError';
}

/**
 * An error answer of vLLM's request handler on `path`: on the Anthropic routes
 * (`/v1/messages`, its `count_tokens`) in Anthropic's shape
 * (`{"type":"error","error":{"type":"NotFoundError",...}}`, vLLM's type names, not
 * Anthropic's), elsewhere OpenAI's. Body validation keeps OpenAI's shape on every route, as
 * vLLM's global handler answers it: use `answerError` for that.
 */
export function answerHandlerError(
  worker: Pick<WorkerSide, 'answerError' | 'answerJson'>,
  res: ServerResponse,
  path: string,
  status: number,
  message: string,
): void {
  if (endpointAt(path)?.errorShape === 'anthropic') {
    worker.answerJson(res, status, { type: 'error', error: { type: vllmErrorType(status), message } });
  } else {
    worker.answerError(res, status, message);
  }
}
