import type { Endpoint } from '../endpoints/endpoint.js';
import type { EngineItem } from '../protocol/annotated.js';
import { Annotated, type WireChunk } from '../protocol/annotated.js';
import type { LLMEngineOutput } from '../protocol/llm-engine-output.js';
import type { RequestBody } from './request-shaping.js';

/** What prefill reports of the prompt (above all `cached_tokens`). */
export type PromptTokensDetails = Record<string, unknown>;

/**
 * The prompt details of a prefill output's usage, if it reports any: the prompt was computed,
 * and its cache hits counted, on the prefill worker.
 */
export function promptDetailsOf(item: EngineItem | undefined): PromptTokensDetails | undefined {
  const found = item?.data?.completion_usage?.prompt_tokens_details;
  return found === undefined || found === null ? undefined : (found as PromptTokensDetails);
}

/**
 * `item` with the prefill leg's `prompt_tokens_details` in the usage it reports, in its data and
 * in what the worker sent for it (the `usage` of an OpenAI chunk or body, SGLang's
 * `meta_info.cached_tokens`, Responses' `input_tokens_details.cached_tokens`, Anthropic's
 * `cache_read_input_tokens`), so that a relay of the worker's own JSON says the same. Decode's
 * own figure for the prompt is wrong: decode did not compute it. An item without usage is
 * returned as it is.
 */
export function withPromptDetails(item: EngineItem, details: PromptTokensDetails): EngineItem {
  const usage = item.data?.completion_usage;
  if (usage === undefined || usage === null) return item;
  const patched: EngineItem = {
    ...item,
    data: {
      ...(item.data as LLMEngineOutput),
      completion_usage: { ...usage, prompt_tokens_details: { ...usage.prompt_tokens_details, ...details } },
    },
  };
  const wire = Annotated.wire(item);
  return wire === undefined
    ? patched
    : Annotated.withWire(
        patched,
        wire.map((chunk) => patchChunk(chunk, details)),
      );
}

type Json = Record<string, unknown>;

const isObject = (value: unknown): value is Json => typeof value === 'object' && value !== null;

/**
 * The usage of the agents' APIs with prefill's cached tokens: Responses'
 * `input_tokens_details.cached_tokens`; Anthropic's `cache_read_input_tokens`, where the worker
 * reports the cache at all (vLLM with `--enable-prompt-tokens-details`), with its
 * `input_tokens` then the rest of the prompt, as Anthropic counts. Undefined for a usage in
 * OpenAI's completion names.
 */
function agentUsage(usage: Json, details: PromptTokensDetails): Json | undefined {
  if (usage.input_tokens === undefined) return undefined;
  const cached = details.cached_tokens;
  if (typeof cached !== 'number') return usage;
  if (isObject(usage.input_tokens_details) || usage.output_tokens_details !== undefined) {
    return {
      ...usage,
      input_tokens_details: { ...(usage.input_tokens_details as Json | undefined), cached_tokens: cached },
    };
  }
  if (typeof usage.cache_read_input_tokens !== 'number') return usage;
  const prompt =
    Number(usage.input_tokens) + usage.cache_read_input_tokens + Number(usage.cache_creation_input_tokens ?? 0);
  return {
    ...usage,
    input_tokens: Math.max(0, prompt - cached - Number(usage.cache_creation_input_tokens ?? 0)),
    cache_read_input_tokens: cached,
  };
}

function patchChunk(chunk: WireChunk, details: PromptTokensDetails): WireChunk {
  const { json } = chunk;
  // Responses' final event: the usage is the response's.
  const response = json.response;
  if (isObject(response) && isObject(response.usage)) {
    const patched = agentUsage(response.usage, details);
    if (patched === undefined || patched === response.usage) return chunk;
    return { ...chunk, text: undefined, json: { ...json, response: { ...response, usage: patched } } };
  }
  const usage = json.usage as Record<string, unknown> | undefined | null;
  if (isObject(usage)) {
    const patched = agentUsage(usage, details);
    if (patched === usage) return chunk;
    if (patched !== undefined) return { ...chunk, text: undefined, json: { ...json, usage: patched } };
  }
  if (typeof usage === 'object' && usage !== null) {
    const prompt = (usage.prompt_tokens_details ?? {}) as Record<string, unknown>;
    return {
      ...chunk,
      text: undefined,
      json: { ...json, usage: { ...usage, prompt_tokens_details: { ...prompt, ...details } } },
    };
  }
  const meta = json.meta_info as Record<string, unknown> | undefined | null;
  if (typeof meta === 'object' && meta !== null && details.cached_tokens !== undefined) {
    return {
      ...chunk,
      text: undefined,
      json: { ...json, meta_info: { ...meta, cached_tokens: details.cached_tokens } },
    };
  }
  return chunk;
}

/**
 * `item` without the usage chunks on its wire (OpenAI's `choices: []` with `usage`, which a
 * worker sends after the finish when asked for `stream_options.include_usage`), its data
 * unchanged: what the client reads when the usage was asked on its behalf, not by it.
 */
export function withoutUsageChunks(item: EngineItem): EngineItem {
  const wire = Annotated.wire(item);
  if (wire === undefined) return item;
  const kept = wire.filter((chunk) => !usageOnly(chunk));
  return kept.length === wire.length ? item : Annotated.withWire(item, kept);
}

function usageOnly(chunk: WireChunk): boolean {
  const { choices, usage } = chunk.json;
  return Array.isArray(choices) && choices.length === 0 && typeof usage === 'object' && usage !== null;
}

/**
 * `request` with `stream_options.include_usage` for a streamed OpenAI request (a `prompt` or
 * `messages`) that did not ask for usage; undefined for any other (a whole request, which vLLM
 * and SGLang refuse `stream_options` on and which reports usage anyway; SGLang's `/generate`;
 * one that asked).
 */
export function withUsageAsked(request: RequestBody, endpoint: Endpoint): RequestBody | undefined {
  if (request.stream !== true || (endpoint.answer !== 'chat' && endpoint.answer !== 'text')) return undefined;
  const options = request.stream_options;
  if ((options as { include_usage?: unknown } | null | undefined)?.include_usage === true) return undefined;
  return {
    ...request,
    stream_options: { ...(typeof options === 'object' && options !== null ? options : {}), include_usage: true },
  };
}
