import * as z from 'zod/mini';
import type { $ZodIssue } from 'zod/v4/core';
import { UnsupportedRequestError } from '../flow/request-shaping.js';
import { describeValue } from '../util/describe-value.js';
import type { Route } from './openai-format.js';

// One schema per route, checked before any worker is called. A request that decode would
// refuse after prefill has computed (and, on vLLM, committed KV for it) pins prefill memory
// until an engine timeout; any client could do that on purpose. The schemas check only the
// fields whose type and range the engines agree on (OpenAI's, vLLM's and SGLang's own
// checks); every other field passes unchecked and unchanged (`looseObject`): the relay is
// faithful, and an engine's extension stays the engine's business.
//
// zod's functional build (`zod/mini`), bundled: only the checks used here are loaded. The
// whole of zod, loaded from node_modules, was 8 MB of an idle proxy's resident set.

const int = (min: number) => z.int().check(z.minimum(min));
const number = (...checks: Parameters<ReturnType<typeof z.number>['check']>) => z.number().check(...checks);
const tokenIds = z.array(z.int().check(z.minimum(0))).check(z.minLength(1));

/** The sampling fields OpenAI's routes take at the top and SGLang's `/generate` in `sampling_params`. */
const samplingRanges = {
  temperature: z.nullish(number(z.minimum(0))),
  top_p: z.nullish(number(z.gt(0), z.maximum(1))),
  top_k: z.nullish(int(-1)),
  min_p: z.nullish(number(z.minimum(0), z.maximum(1))),
  stop: z.nullish(z.union([z.string(), z.array(z.string())])),
  ignore_eos: z.nullish(z.boolean()),
};

const sampling = {
  ...samplingRanges,
  model: z.nullish(z.string().check(z.minLength(1))),
  stream: z.nullish(z.boolean()),
  stream_options: z.nullish(
    z.looseObject({ include_usage: z.nullish(z.boolean()), continuous_usage_stats: z.nullish(z.boolean()) }),
  ),
  max_tokens: z.nullish(int(1)),
  min_tokens: z.nullish(int(0)),
  n: z.nullish(int(1)),
  presence_penalty: z.nullish(number(z.minimum(-2), z.maximum(2))),
  frequency_penalty: z.nullish(number(z.minimum(-2), z.maximum(2))),
  repetition_penalty: z.nullish(number(z.gt(0))),
  seed: z.nullish(z.union([z.int(), z.bigint()])),
};

const SCHEMAS: Record<Route, z.ZodMiniType> = {
  completions: z.looseObject({
    ...sampling,
    prompt: z.union(
      [z.string(), z.array(z.string()).check(z.minLength(1)), tokenIds, z.array(tokenIds).check(z.minLength(1))],
      { error: 'must be a string, a list of strings, a list of token ids or a list of such lists' },
    ),
    best_of: z.nullish(int(1)),
    echo: z.nullish(z.boolean()),
    logprobs: z.nullish(int(0)),
    suffix: z.nullish(z.string()),
  }),
  chat: z.looseObject({
    ...sampling,
    messages: z.array(z.looseObject({ role: z.string().check(z.minLength(1)) })).check(z.minLength(1)),
    max_completion_tokens: z.nullish(int(1)),
    logprobs: z.nullish(z.boolean()),
    top_logprobs: z.nullish(int(0)),
    tools: z.nullish(z.array(z.looseObject({ type: z.string() }))),
  }),
  generate: z.looseObject({
    text: z.nullish(z.union([z.string(), z.array(z.string()).check(z.minLength(1))])),
    input_ids: z.nullish(z.union([tokenIds, z.array(tokenIds).check(z.minLength(1))])),
    stream: z.nullish(z.boolean()),
    sampling_params: z.nullish(
      z.looseObject({
        ...samplingRanges,
        max_new_tokens: z.nullish(int(0)),
        min_new_tokens: z.nullish(int(0)),
        n: z.nullish(int(1)),
      }),
    ),
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
 * catch (error) { const { status, body: answer } = errorToResponse(error); } // a 400 naming `param`
 *
 * @throws {UnsupportedRequestError} naming the field and saying what was expected;
 *   {TypeError} for a route that is none of `completions`, `chat` and `generate` (the program's mistake).
 */
export function validateRequest(
  route: Route,
  body: unknown,
  limits?: ModelLimits,
): asserts body is Record<string, unknown> {
  if (!Object.hasOwn(SCHEMAS, route)) {
    throw new TypeError(
      `validateRequest: route must be one of ${Object.keys(SCHEMAS).join(', ')}, got ${describeValue(route)}`,
    );
  }
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
    const issue = result.error.issues[0] as $ZodIssue;
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
function expectation(issue: $ZodIssue): string {
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
