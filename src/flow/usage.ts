import type { Endpoint } from '../endpoints/endpoint.js';
import { endpointOf } from '../endpoints/registry.js';
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
 * `meta_info.cached_tokens`), so that a relay of the worker's own JSON says the same. Decode's
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

function patchChunk(chunk: WireChunk, details: PromptTokensDetails): WireChunk {
  const { json } = chunk;
  const usage = json.usage as Record<string, unknown> | undefined | null;
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
export function withUsageAsked(
  request: RequestBody,
  endpoint: Endpoint = endpointOf(request),
): RequestBody | undefined {
  if (request.stream !== true || (endpoint.answer !== 'chat' && endpoint.answer !== 'text')) return undefined;
  const options = request.stream_options;
  if ((options as { include_usage?: unknown } | null | undefined)?.include_usage === true) return undefined;
  return {
    ...request,
    stream_options: { ...(typeof options === 'object' && options !== null ? options : {}), include_usage: true },
  };
}
