import { z } from 'zod';
import { UnsupportedRequestError } from '../flow/request-shaping.js';
import { describeValue } from '../util/describe-value.js';
import type { Route } from './openai-format.js';

// One schema per route, checked before any worker is called. A request that decode would
// refuse after prefill has computed (and, on vLLM, committed KV for it) pins prefill memory
// until an engine timeout; any client could do that on purpose. The schemas check only the
// fields whose type and range the engines agree on (OpenAI's, vLLM's and SGLang's own
// checks); every other field passes unchecked and unchanged (`looseObject`): the relay is
// faithful, and an engine's extension stays the engine's business.

const int = (min: number) => z.number().int().min(min);
const tokenIds = z.array(z.number().int().min(0)).min(1);

/** The sampling fields OpenAI's routes take at the top and SGLang's `/generate` in `sampling_params`. */
const samplingRanges = {
  temperature: z.number().min(0).nullish(),
  top_p: z.number().gt(0).max(1).nullish(),
  top_k: int(-1).nullish(),
  min_p: z.number().min(0).max(1).nullish(),
  stop: z.union([z.string(), z.array(z.string())]).nullish(),
  ignore_eos: z.boolean().nullish(),
};

const sampling = {
  ...samplingRanges,
  model: z.string().min(1).nullish(),
  stream: z.boolean().nullish(),
  stream_options: z
    .looseObject({ include_usage: z.boolean().nullish(), continuous_usage_stats: z.boolean().nullish() })
    .nullish(),
  max_tokens: int(1).nullish(),
  min_tokens: int(0).nullish(),
  n: int(1).nullish(),
  presence_penalty: z.number().min(-2).max(2).nullish(),
  frequency_penalty: z.number().min(-2).max(2).nullish(),
  repetition_penalty: z.number().gt(0).nullish(),
  seed: z.union([z.number().int(), z.bigint()]).nullish(),
};

const SCHEMAS: Record<Route, z.ZodType> = {
  completions: z.looseObject({
    ...sampling,
    prompt: z.union([z.string(), z.array(z.string()).min(1), tokenIds, z.array(tokenIds).min(1)], {
      error: 'must be a string, a list of strings, a list of token ids or a list of such lists',
    }),
    best_of: int(1).nullish(),
    echo: z.boolean().nullish(),
    logprobs: int(0).nullish(),
    suffix: z.string().nullish(),
  }),
  chat: z.looseObject({
    ...sampling,
    messages: z.array(z.looseObject({ role: z.string().min(1) })).min(1),
    max_completion_tokens: int(1).nullish(),
    logprobs: z.boolean().nullish(),
    top_logprobs: int(0).nullish(),
    tools: z.array(z.looseObject({ type: z.string() })).nullish(),
  }),
  generate: z.looseObject({
    text: z.union([z.string(), z.array(z.string()).min(1)]).nullish(),
    input_ids: z.union([tokenIds, z.array(tokenIds).min(1)]).nullish(),
    stream: z.boolean().nullish(),
    sampling_params: z
      .looseObject({
        ...samplingRanges,
        max_new_tokens: int(0).nullish(),
        min_new_tokens: int(0).nullish(),
        n: int(1).nullish(),
      })
      .nullish(),
  }),
};

/** What is known of the served models: their context length (vLLM's and SGLang's `max_model_len`). */
export interface ModelLimits {
  /** The context length of `model` (or of the only model served, when the request names none). */
  maxModelLen(model: unknown): number | undefined;
}

/**
 * Checks a request body for `route` before any worker is called, as `disagg serve` does: a
 * JSON object that fits its route (chat takes `messages`, completions a `prompt`, SGLang's
 * `/generate` a `text`, `input_ids` or `input_embeds`), the types and ranges of the sampling
 * and length fields, `stream`, `n`, a prompt or messages that are well formed, the
 * combinations the engines refuse (`stream_options` without `stream`, `top_logprobs` without
 * `logprobs`), and a length budget beyond the model's context (`limits.maxModelLen`, vLLM's and
 * SGLang's `max_model_len`; with a prompt of token ids, prompt and budget together). Without
 * it, a request decode refuses (`max_tokens: "ten"`) would have prefill compute, and hold, KV
 * for nothing. What needs the tokenizer (a text prompt longer than the context) is left to the
 * engine; other fields pass unchecked.
 *
 * @example
 * try { validateRequest('completions', body, { maxModelLen: () => 32_768 }); }
 * catch (error) { const { status, body } = errorToResponse(error); } // a 400 naming `param`
 *
 * @throws {UnsupportedRequestError} naming the field and saying what was expected.
 */
export function validateRequest(
  route: Route,
  body: unknown,
  limits?: ModelLimits,
): asserts body is Record<string, unknown> {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    throw new UnsupportedRequestError('body', `The request body must be a JSON object, got ${describeValue(body)}`);
  }
  checkRouteBody(route, body as Record<string, unknown>);
  checkRequest(route, body as Record<string, unknown>, limits);
}

/**
 * The field checks of {@link validateRequest}, for a body already known to fit its route.
 *
 * @throws {UnsupportedRequestError} naming the field and saying what was expected.
 */
export function checkRequest(route: Route, body: Record<string, unknown>, limits?: ModelLimits): void {
  const result = SCHEMAS[route].safeParse(body);
  if (!result.success) {
    const issue = result.error.issues[0] as z.core.$ZodIssue;
    const param = issue.path.map(String).join('.') || 'body';
    const given = issue.path.reduce<unknown>((value, key) => (value as Record<PropertyKey, unknown>)?.[key], body);
    throw new UnsupportedRequestError(param, `${param} ${expectation(issue)}, got ${describeValue(given)}`);
  }
  if (body.stream !== true && body.stream_options !== undefined && body.stream_options !== null) {
    throw new UnsupportedRequestError('stream_options', 'stream_options can only be given with stream: true');
  }
  if (route === 'chat' && body.top_logprobs !== undefined && body.top_logprobs !== null && body.logprobs !== true) {
    throw new UnsupportedRequestError('top_logprobs', 'top_logprobs needs logprobs: true');
  }
  checkContext(route, body, limits);
}

/** A length budget the model's context cannot hold is refused here rather than by decode. */
function checkContext(route: Route, body: Record<string, unknown>, limits: ModelLimits | undefined): void {
  const context = limits?.maxModelLen(body.model);
  if (context === undefined) return;
  const [field, budget] =
    route === 'generate'
      ? [
          'sampling_params.max_new_tokens',
          (body.sampling_params as { max_new_tokens?: unknown } | null)?.max_new_tokens,
        ]
      : route === 'chat' && typeof body.max_completion_tokens === 'number'
        ? ['max_completion_tokens', body.max_completion_tokens]
        : ['max_tokens', body.max_tokens];
  if (typeof budget !== 'number') return;
  // Token ids say the prompt's length; of a text prompt (and chat messages) only the tokenizer knows it.
  const ids = route === 'generate' ? body.input_ids : route === 'completions' ? body.prompt : undefined;
  const promptTokens = Array.isArray(ids) && ids.every((id) => typeof id === 'number') ? ids.length : 0;
  if (promptTokens + budget > context) {
    const prompt = promptTokens > 0 ? ` with a prompt of ${promptTokens} tokens` : '';
    throw new UnsupportedRequestError(
      field,
      `${field} ${budget}${prompt} is more than the model's context of ${context} tokens (max_model_len)`,
    );
  }
}

/** What an issue says was expected, in words. */
function expectation(issue: z.core.$ZodIssue): string {
  switch (issue.code) {
    case 'invalid_type':
      return issue.expected === 'int' ? 'must be an integer' : `must be ${article(issue.expected)}`;
    case 'too_small':
      if (issue.origin === 'array' || issue.origin === 'string') return 'must not be empty';
      return `must be ${issue.inclusive === false ? 'greater than' : 'at least'} ${String(issue.minimum)}`;
    case 'too_big':
      // Every maximum here is inclusive (`max`, never `lt`).
      return `must be at most ${String(issue.maximum)}`;
    case 'invalid_union':
      return issue.message.startsWith('must ') ? issue.message : 'has none of the accepted forms';
    default:
      return issue.message;
  }
}

function article(type: string): string {
  return /^[aeiou]/.test(type) ? `an ${type}` : `a ${type}`;
}

/**
 * A body must fit its route: the chat route takes `messages`, completions a `prompt`, SGLang's
 * `/generate` a `text` or `input_ids`; a body for another route is refused, naming the field.
 */
function checkRouteBody(route: Route, body: Record<string, unknown>): void {
  const has = (field: string) => body[field] !== undefined && body[field] !== null;
  if (route === 'chat' && (!Array.isArray(body.messages) || body.messages.length === 0)) {
    throw new UnsupportedRequestError(
      'messages',
      has('prompt')
        ? 'The chat route takes messages, not a prompt: send a prompt to /v1/completions'
        : 'The chat route needs messages: a non-empty list',
    );
  }
  if (route === 'completions' && !has('prompt')) {
    throw new UnsupportedRequestError(
      'prompt',
      has('messages')
        ? 'The completions route takes a prompt, not messages: send messages to /v1/chat/completions'
        : 'The completions route needs a prompt',
    );
  }
  if (route === 'generate' && !has('text') && !has('input_ids') && !has('input_embeds')) {
    throw new UnsupportedRequestError('text', '/generate needs a text, input_ids or input_embeds');
  }
}
