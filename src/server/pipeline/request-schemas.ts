import type { $ZodIssue } from 'zod/v4/core';
import { budgetOf, type Endpoint } from '../../endpoints/endpoint.js';
import { ENDPOINTS, type EndpointName, endpointNamed, isEndpointName } from '../../endpoints/registry.js';
import { UnsupportedRequestError } from '../../flow/request-shaping.js';
import { describeKind, describeValue } from '../../util/describe-value.js';
import type { ModelLimits } from '../fleet/model-limits.js';

export type { ModelLimits } from '../fleet/model-limits.js';

// Each endpoint's schema (src/endpoints/), checked before any worker is called. A request that
// decode would refuse after prefill has computed (and, on vLLM, committed KV for it) pins
// prefill memory until an engine timeout; any client could do that on purpose. The schemas
// check only the fields whose type and range the engines agree on; every other field passes
// unchecked and unchanged (`looseObject`): the relay is faithful, and an engine's extension
// stays the engine's business.

/**
 * The fields whose values are a user's prompt, or what was said in it, on some route: a
 * refusal of one (or of anything inside one) says the value's kind, never its text, since
 * every refusal is logged. The other fields are settings (`max_tokens`, `model`, ...), quoted
 * back to help the client see its mistake.
 */
const PROMPT_FIELDS: ReadonlySet<string> = new Set([
  'prompt',
  'messages',
  'input',
  'instructions',
  'system',
  'text',
  'suffix',
  'tools',
  'documents',
  'query',
  'queries',
  'text_1',
  'text_2',
  'items',
  'data',
]);

/** The keys inside a prompt field that name a part's kind (`role`, `type`), not what was said: quoted back. */
const NAMING_KEYS: ReadonlySet<string> = new Set(['role', 'type']);

/** Whether the value at `path` of a body may be prompt text: inside a prompt field, and no part's kind. */
function mayBePromptText(path: readonly PropertyKey[]): boolean {
  return PROMPT_FIELDS.has(String(path[0])) && !NAMING_KEYS.has(String(path.at(-1)));
}

/**
 * Checks a request body for `route` before any worker is called, as `disagg serve` does: a
 * JSON object that fits its endpoint (chat takes `messages`, completions a `prompt`, SGLang's
 * `/generate` a `text`, `input_ids` or `input_embeds`, embeddings an `input`, a rerank a
 * `query` and `documents`), the types and ranges of the sampling and length fields, `stream`,
 * `n`, a prompt or messages that are well formed (the agents' APIs item by item: Responses'
 * input items and content parts, Anthropic's messages and content blocks, of the types and
 * roles the APIs document), the combinations the engines refuse (`stream_options` without
 * `stream`, `top_logprobs` without `logprobs`), and a length budget beyond the model's context
 * (`limits.maxModelLen`, vLLM's and SGLang's `max_model_len`; with a prompt of token ids,
 * prompt and budget together; with Responses' or Messages' items, the fewest tokens they can
 * be and the budget). Without it, a request decode refuses (`max_tokens: "ten"`) would have
 * prefill compute, and hold, KV for nothing. A field at fault is named by its path
 * (`input[3].content[0].type`). The exact length of a text prompt needs the tokenizer
 * (`checkPromptTokens`, where the proxy has counted it); other fields pass unchecked.
 *
 * @example
 * try { validateRequest('completions', body, { maxModelLen: () => 32_768 }); }
 * catch (error) { const { status, body: answer } = errorToResponse(error); } // a 400 naming `param`
 *
 * @throws {UnsupportedRequestError} naming the field and saying what was expected;
 *   {TypeError} for a route that names no endpoint (the program's mistake).
 */
export function validateRequest(
  route: EndpointName | Endpoint,
  body: unknown,
  limits?: ModelLimits,
): asserts body is Record<string, unknown> {
  if (typeof route !== 'object' && !isEndpointName(route)) {
    throw new TypeError(
      `validateRequest: route must be one of ${ENDPOINTS.map((each) => each.name).join(', ')}, got ${describeValue(route)}`,
    );
  }
  const endpoint = typeof route === 'object' ? route : endpointNamed(route);
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    throw new UnsupportedRequestError('body', `The request body must be a JSON object, got ${describeKind(body)}`);
  }
  const misfit = endpoint.misfit(body as Record<string, unknown>);
  if (misfit !== undefined) throw new UnsupportedRequestError(misfit.param, misfit.message);
  checkRequest(endpoint, body as Record<string, unknown>, limits);
}

/**
 * The field checks of {@link validateRequest}, for a body already known to fit its endpoint.
 *
 * @throws {UnsupportedRequestError} naming the field and saying what was expected.
 */
export function checkRequest(
  route: EndpointName | Endpoint,
  body: Record<string, unknown>,
  limits?: ModelLimits,
): void {
  const endpoint = typeof route === 'object' ? route : endpointNamed(route);
  const result = endpoint.schema.safeParse(body);
  if (!result.success) {
    const issue = result.error.issues[0] as $ZodIssue;
    const param = pathText(issue.path);
    const given = issue.path.reduce<unknown>((value, key) => (value as Record<PropertyKey, unknown>)?.[key], body);
    // A value that may be the user's prompt is said by its kind: the message goes to the log.
    const quiet = issue.code === 'custom' ? issue.params?.quiet === true : mayBePromptText(issue.path);
    const shown = quiet ? describeKind(given) : describeValue(given);
    throw new UnsupportedRequestError(param, `${param} ${expectation(issue)}, got ${shown}`);
  }
  if (body.stream !== true && body.stream_options !== undefined && body.stream_options !== null) {
    throw new UnsupportedRequestError('stream_options', 'stream_options can only be given with stream: true');
  }
  const combination = endpoint.combination?.(body);
  if (combination !== undefined) throw new UnsupportedRequestError(combination.param, combination.message);
  checkContext(endpoint, body, limits);
}

/**
 * A length budget the model's context cannot hold is refused here rather than by decode; so is
 * a prompt that cannot fit, by its length where the body says it (token ids) or else by the
 * fewest tokens it can be ({@link Endpoint.promptFloor}: one per chat message), so that
 * 200,000 messages against a context of 32,768 never reach prefill. An endpoint that
 * generates nothing (a token count, embeddings) is not held to the context here.
 */
function checkContext(endpoint: Endpoint, body: Record<string, unknown>, limits: ModelLimits | undefined): void {
  if (endpoint.budgetFields.length === 0 || limits === undefined) return;
  const budget = budgetOf(endpoint, body);
  // Token ids say the prompt's length; of a text prompt (and chat messages) only the tokenizer knows it.
  const promptTokens = endpoint.promptLength(body);
  if (promptTokens !== undefined || endpoint.promptFloor === undefined) {
    if (budget === undefined) return;
    const context = limits.maxModelLen(body.model);
    if (context !== undefined) refuseBeyond(context, budget, { tokens: promptTokens ?? 0, counted: 'ids' });
    return;
  }
  const floor = endpoint.promptFloor(body);
  const context = limits.maxModelLen(body.model);
  if (context !== undefined) refuseBeyond(context, budget, { ...floor, counted: 'floor' });
}

/**
 * The context check with the prompt's exact length, once the router's tokenizer has counted it
 * (`--tokenizer`): a prompt that with the output budget is longer than the model's context is
 * refused before prefill, as the engine would refuse it there.
 *
 * @example
 * checkPromptTokens(endpointNamed('responses'), { input: 'Hi', max_output_tokens: 64 }, limits, 40_000);
 * // throws: input is 40000 tokens (by the router's tokenizer), which with max_output_tokens 64 is more than ...
 *
 * @throws {UnsupportedRequestError} naming the prompt's field (or the budget's, where the
 *   prompt alone fits) and both lengths.
 */
export function checkPromptTokens(
  endpoint: Endpoint,
  body: Record<string, unknown>,
  limits: ModelLimits,
  promptTokens: number,
): void {
  if (endpoint.budgetFields.length === 0) return;
  const context = limits.maxModelLen(body.model);
  if (context === undefined) return;
  const field = endpoint.promptFloor?.(body).field ?? 'prompt';
  refuseBeyond(context, budgetOf(endpoint, body), { field, tokens: promptTokens, counted: 'tokenizer' });
}

/** How a prompt's length was known: from its token ids, a floor, the router's tokenizer. */
type PromptCount = { field?: string; tokens: number; counted: 'ids' | 'floor' | 'tokenizer' };

/** Refuses a prompt and budget that together are longer than `context`. */
function refuseBeyond(
  context: number,
  budget: { field: string; tokens: number } | undefined,
  prompt: PromptCount,
): void {
  const output = budget?.tokens ?? 0;
  if (prompt.tokens + output <= context) return;
  const limit = `the model's context of ${context} tokens (max_model_len)`;
  if (prompt.counted === 'ids' || (budget !== undefined && prompt.tokens <= context)) {
    // The budget is what does not fit: named, with the prompt it comes with.
    const field = budget?.field ?? 'prompt';
    // A floor is named only where it is what tips the budget over.
    const named = prompt.tokens > 0 && (prompt.counted !== 'floor' || output <= context);
    const at = prompt.counted === 'floor' ? 'at least ' : '';
    const of = named ? ` with a prompt of ${at}${tokens(prompt.tokens)}` : '';
    throw new UnsupportedRequestError(field, `${field} ${output}${of} is more than ${limit}`);
  }
  const field = prompt.field ?? 'prompt';
  const length =
    prompt.counted === 'floor'
      ? `is at least ${tokens(prompt.tokens)} (one per message it becomes under any chat template)`
      : `is ${tokens(prompt.tokens)} (by the router's tokenizer)`;
  const beyond = budget === undefined ? 'more than' : `which with ${budget.field} ${budget.tokens} is more than`;
  throw new UnsupportedRequestError(field, `${field} ${length}, ${beyond} ${limit}`);
}

const tokens = (count: number): string => (count === 1 ? '1 token' : `${count} tokens`);

/**
 * A zod issue's path as the APIs name a field: `input[3].content[0].type`, `messages[0].role`,
 * `sampling_params.max_new_tokens`; `body` for the body itself.
 */
export function pathText(path: readonly PropertyKey[]): string {
  let text = '';
  for (const key of path) {
    if (typeof key === 'number') text += `[${key}]`;
    else text += text === '' ? String(key) : `.${String(key)}`;
  }
  return text === '' ? 'body' : text;
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
      return `must be at most ${String(issue.maximum)}${UNITS[issue.origin] ?? ''}`;
    case 'invalid_union':
      return issue.message.startsWith('must ') ? issue.message : 'has none of the accepted forms';
    default:
      return issue.message;
  }
}

/** What a length counts, by what was measured. */
const UNITS: Readonly<Record<string, string>> = { string: ' characters', array: ' items' };

function article(type: string): string {
  return /^[aeiou]/.test(type) ? `an ${type}` : `a ${type}`;
}
