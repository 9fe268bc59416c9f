/**
 * What a request asks of its prompt that only the prefill leg can compute: prompt logprobs
 * (vLLM's `prompt_logprobs`), an echo of the prompt with its logprobs (completions' `echo` with
 * `logprobs`, vLLM's chat `echo`), SGLang's input logprobs (`/generate` with `return_logprob`).
 * Decode never runs the prompt forward (its KV came from prefill), so it cannot answer them:
 * vLLM's decode crashes on prompt logprobs over a connector's KV (vllm#50792), or, once it
 * honours `skip_reading_prefix_cache`, throws the transferred KV away and computes the whole
 * prompt again; SGLang's answers an empty list. So the decode leg does not get those fields,
 * and what prefill computed is merged into decode's answer, where an engine serving the
 * request alone would have put it, as vllm-project/router (`logprobs_merge.rs`), SGLang's
 * `mini_lb.py` and smg's `pd_router.rs` do for the parts they handle.
 */

import type { Endpoint } from '../endpoints/endpoint.js';
import type { EngineItem } from '../protocol/annotated.js';
import { Annotated, type WireChunk } from '../protocol/annotated.js';
import type { LLMEngineOutput } from '../protocol/llm-engine-output.js';
import type { RequestBody } from './request-shaping.js';

type Json = Record<string, unknown>;

/**
 * The prompt side of one request: the fields decode must not get, and how prefill's answer is
 * merged into each of decode's items.
 */
export interface PromptSide {
  /** Fields of the client's request left out of the decode leg's body. */
  readonly strip: readonly string[];
  /**
   * The merge of `prefill` (its answer, undefined when it has none) into decode's items, one
   * item at a time in stream order; undefined when there is nothing to merge.
   */
  merge(prefill: EngineItem | undefined): ((item: EngineItem) => EngineItem) | undefined;
}

/**
 * What an engine computes of a prompt that only its prefill leg can, beside OpenAI's echo of a
 * completion's prompt with its logprobs (every engine's): declared by the engine's connector,
 * and read by {@link promptSideWith}, so that the flow names no engine.
 */
export interface PromptParts {
  /** A request's `prompt_logprobs`, in each completion choice and at the top of a chat answer (vLLM's). */
  readonly promptLogprobs?: boolean | undefined;
  /** Chat's `echo`: the last message's text before the answer (vLLM's). */
  readonly chatEcho?: boolean | undefined;
  /** `/generate`'s input logprobs (`return_logprob`), in each answer's `meta_info` (SGLang's). */
  readonly inputLogprobs?: boolean | undefined;
}

const given = (value: unknown) => value !== undefined && value !== null;

/**
 * The prompt side of `request` on `endpoint`, for an engine that computes `parts` of a prompt on
 * prefill only; undefined when it asks for nothing of the kind (the common case: no cost at all).
 *
 * @example
 * promptSideWith({ promptLogprobs: true }, { prompt: 'Hi', prompt_logprobs: 1 }, endpointNamed('completions'));
 * // strip ['prompt_logprobs'], merge choices[i].prompt_logprobs
 */
export function promptSideWith(parts: PromptParts, request: RequestBody, endpoint: Endpoint): PromptSide | undefined {
  const route = endpoint.answer;
  if (route === 'json') return undefined;
  if (route === 'generate') {
    if (parts.inputLogprobs !== true || !wantsInputLogprobs(request.return_logprob)) return undefined;
    return { strip: [], merge: (prefill) => mergeInputLogprobs(prefill) };
  }
  const echoed = route === 'text' && request.echo === true && given(request.logprobs);
  const promptLogprobs = parts.promptLogprobs === true && given(request.prompt_logprobs);
  const chatEcho = parts.chatEcho === true && route === 'chat' && request.echo === true;
  const strip = [...(promptLogprobs ? ['prompt_logprobs'] : []), ...(echoed || chatEcho ? ['echo'] : [])];
  if (strip.length === 0) return undefined;
  return {
    strip,
    merge: (prefill) => {
      const answer = bodyOf(prefill);
      if (answer === undefined) return undefined;
      return route === 'chat'
        ? mergeChat(answer, chatEcho ? echoOf(request.messages) : undefined)
        : mergeCompletion(answer, echoed ? request.prompt : undefined);
    },
  };
}

/**
 * Why `request` cannot have its prompt side on `endpoint`'s disaggregated path, whatever the
 * engine, if it cannot: an echo with logprobs needs the prompt as text, which a prompt of token
 * ids is not. An engine's own refusals are its connector's.
 *
 * @example
 * refuseEchoOfIds({ prompt: [1, 2], echo: true, logprobs: 1 }, endpointNamed('completions')); // { param: 'echo', ... }
 */
export function refuseEchoOfIds(
  request: RequestBody,
  endpoint: Endpoint,
): { param: string; message: string } | undefined {
  if (endpoint.answer === 'text' && request.echo === true && given(request.logprobs)) {
    const prompt = request.prompt;
    const texts = typeof prompt === 'string' || (Array.isArray(prompt) && prompt.every((p) => typeof p === 'string'));
    if (!texts) {
      return {
        param: 'echo',
        message:
          'echo with logprobs needs a text prompt when disaggregated: the echo and its logprobs come from the prefill leg, and a prompt of token ids has no text to echo',
      };
    }
  }
  return undefined;
}

function wantsInputLogprobs(value: unknown): boolean {
  return value === true || (Array.isArray(value) && value.includes(true));
}

/** The JSON of a whole answer (prefill's), if it has one. */
function bodyOf(item: EngineItem | undefined): unknown {
  const chunk = item === undefined ? undefined : Annotated.wire(item)?.[0];
  return chunk?.json;
}

/** `item` with each of its wire chunks passed through `patch` (which may add chunks after one); unchanged chunks keep their text. */
function patchItem(
  item: EngineItem,
  patch: (json: Json, form: WireChunk['form']) => Json[] | undefined,
  data?: (data: LLMEngineOutput) => LLMEngineOutput,
): EngineItem {
  const wire = Annotated.wire(item);
  if (wire === undefined) return item;
  let changed = false;
  const chunks: WireChunk[] = [];
  for (const chunk of wire) {
    const patched = patch(chunk.json, chunk.form);
    if (patched === undefined) chunks.push(chunk);
    else {
      changed = true;
      // The worker's own JSON, returned as it was, keeps its text.
      for (const json of patched)
        chunks.push(json === chunk.json ? chunk : { form: chunk.form, text: undefined, json });
    }
  }
  if (!changed) return item;
  const next: EngineItem =
    data === undefined || item.data === undefined ? { ...item } : { ...item, data: data(item.data) };
  return Annotated.withWire(next, chunks);
}

function choicesOf(json: unknown): Json[] {
  const choices = (json as { choices?: unknown } | null)?.choices;
  return Array.isArray(choices) ? (choices as Json[]) : [];
}

function byIndex(json: unknown): Map<number, Json> {
  const map = new Map<number, Json>();
  for (const choice of choicesOf(json)) map.set(typeof choice.index === 'number' ? choice.index : 0, choice);
  return map;
}

/** Python's `len` of a string: code points, which vLLM's text offsets count. */
function length(text: string): number {
  let count = 0;
  for (const _ of text) count++;
  return count;
}

/**
 * Completions: each choice gets prefill's `prompt_logprobs` (whole answers, as vLLM puts them
 * there) and, for an echo, the prompt's text before its own and prefill's logprobs of the
 * prompt before its own. Prefill computed one token after the prompt; its entry is dropped
 * (decode computed that token again). Offsets continue from where the prompt's end: on the
 * first chunk of a choice from prefill's offset of that token (vLLM counts offsets over the
 * tokens' text), on later ones by the prompt's length (vLLM counts what it has sent). SGLang's
 * offsets (-1: not supported) stay as they are.
 */
function mergeCompletion(prefill: unknown, prompt: unknown): (item: EngineItem) => EngineItem {
  const prefillChoices = byIndex(prefill);
  const echoed = new Set<number>();
  const promptText = (index: number) =>
    typeof prompt === 'string' ? prompt : Array.isArray(prompt) ? (prompt[index] as string | undefined) : undefined;
  /** The echo put before the first choice of the item being patched (the item's data is that choice's). */
  let prefixed: string | undefined;
  const patchChoice = (choice: Json, form: WireChunk['form'], first: boolean): Json => {
    const index = typeof choice.index === 'number' ? choice.index : 0;
    const from = prefillChoices.get(index);
    let out = choice;
    if (form === 'body' && from !== undefined && given(from.prompt_logprobs)) {
      out = { ...out, prompt_logprobs: from.prompt_logprobs };
    }
    const text = promptText(index);
    if (text === undefined || from === undefined) return out;
    if (echoed.has(index)) return { ...out, logprobs: shifted(out.logprobs, length(text)) };
    echoed.add(index);
    if (first) prefixed = text;
    const own = typeof out.text === 'string' ? out.text : '';
    return { ...out, text: `${text}${own}`, logprobs: joined(promptEntries(from.logprobs), out.logprobs) };
  };
  return (item) => {
    prefixed = undefined;
    let first = true;
    return patchItem(
      item,
      (json, form) => {
        const choices = choicesOf(json);
        if (choices.length === 0) return undefined;
        const patched = choices.map((choice, i) => patchChoice(choice, form, first && i === 0));
        first = false;
        // Nothing of prefill's for any choice: the chunk stays as the worker wrote it.
        if (patched.every((choice, i) => choice === choices[i])) return undefined;
        return [{ ...json, choices: patched }];
      },
      (data) => (prefixed === undefined ? data : { ...data, text: `${prefixed}${data.text ?? ''}` }),
    );
  };
}

interface TextLogprobs {
  tokens?: unknown[];
  token_logprobs?: unknown[];
  top_logprobs?: unknown[];
  text_offset?: unknown[];
}

/** Prefill's logprobs of the prompt: all but its last entry (the token it computed after it), and where that token's text began. */
function promptEntries(logprobs: unknown): { entries: TextLogprobs; next: number | undefined } | undefined {
  if (typeof logprobs !== 'object' || logprobs === null) return undefined;
  const all = logprobs as TextLogprobs;
  const count = Array.isArray(all.tokens) ? all.tokens.length - 1 : -1;
  if (count < 0) return undefined;
  const entries: TextLogprobs = {};
  for (const field of ['tokens', 'token_logprobs', 'top_logprobs', 'text_offset'] as const) {
    const list = all[field];
    if (Array.isArray(list)) entries[field] = list.slice(0, count);
  }
  const next = Array.isArray(all.text_offset) ? all.text_offset[count] : undefined;
  return { entries, next: typeof next === 'number' && next >= 0 ? next : undefined };
}

function joined(head: ReturnType<typeof promptEntries>, own: unknown): unknown {
  if (head === undefined) return own;
  const mine = (typeof own === 'object' && own !== null ? own : {}) as TextLogprobs;
  const moved = head.next === undefined ? mine : (shifted(mine, head.next) as TextLogprobs);
  const out: Record<string, unknown> = { ...mine };
  for (const field of ['tokens', 'token_logprobs', 'top_logprobs', 'text_offset'] as const) {
    const before = head.entries[field];
    const after = moved[field];
    if (Array.isArray(before) || Array.isArray(after)) out[field] = [...(before ?? []), ...(after ?? [])];
  }
  return out;
}

/** Logprobs with their text offsets moved by `by` (offsets below 0, SGLang's "not supported", stay). */
function shifted(logprobs: unknown, by: number): unknown {
  if (typeof logprobs !== 'object' || logprobs === null || by === 0) return logprobs;
  const offsets = (logprobs as TextLogprobs).text_offset;
  if (!Array.isArray(offsets)) return logprobs;
  return {
    ...(logprobs as Json),
    text_offset: offsets.map((offset) => (typeof offset === 'number' && offset >= 0 ? offset + by : offset)),
  };
}

/** What vLLM's chat `echo` puts before the answer: the last message's text, and its role (the answer's must match). */
function echoOf(messages: unknown): { role: unknown; text: string } | undefined {
  if (!Array.isArray(messages) || messages.length === 0) return undefined;
  const last = messages.at(-1) as { role?: unknown; content?: unknown } | null;
  const content = last?.content;
  const text =
    typeof content === 'string'
      ? content
      : Array.isArray(content)
        ? content
            .filter((part) => (part as { type?: unknown } | null)?.type === 'text')
            .map((part) => String((part as { text?: unknown }).text ?? ''))
            .join('\n')
        : '';
  return text === '' ? undefined : { role: last?.role, text };
}

/**
 * Chat: a whole answer gets prefill's top-level `prompt_logprobs`; with vLLM's `echo`, a choice
 * whose role is the last message's starts with that message's text (whole), or gets it as a
 * chunk of its own right after its role chunk (streamed), as vLLM sends it.
 */
function mergeChat(
  prefill: unknown,
  echo: { role: unknown; text: string } | undefined,
): (item: EngineItem) => EngineItem {
  const promptLogprobs = (prefill as { prompt_logprobs?: unknown } | null)?.prompt_logprobs;
  const echoed = new Set<number>();
  let added = '';
  return (item) => {
    added = '';
    return patchItem(
      item,
      (json, form) => {
        if (form === 'body') {
          const withLogprobs = given(promptLogprobs) ? { ...json, prompt_logprobs: promptLogprobs } : json;
          if (echo === undefined) return withLogprobs === json ? undefined : [withLogprobs];
          const own = choicesOf(json);
          const choices = own.map((choice) => {
            const message = choice.message as Json | undefined;
            if (message?.role !== echo.role) return choice;
            const content = typeof message?.content === 'string' ? message.content : '';
            if (added === '') added = echo.text;
            return { ...choice, message: { ...message, content: `${echo.text}${content}` } };
          });
          // Neither prompt logprobs nor an echo for it: the answer stays as the worker wrote it.
          if (withLogprobs === json && choices.every((choice, i) => choice === own[i])) return undefined;
          return [{ ...withLogprobs, choices }];
        }
        if (echo === undefined) return undefined;
        const extra: Json[] = [];
        for (const choice of choicesOf(json)) {
          const index = typeof choice.index === 'number' ? choice.index : 0;
          const role = (choice.delta as Json | undefined)?.role;
          if (role === undefined || echoed.has(index)) continue;
          echoed.add(index);
          if (role !== echo.role) continue;
          const { usage: _usage, choices: _choices, ...envelope } = json;
          extra.push({
            ...envelope,
            choices: [{ index, delta: { content: echo.text }, logprobs: null, finish_reason: null }],
          });
          added = echo.text;
        }
        return extra.length === 0 ? undefined : [json, ...extra];
      },
      (data) => (added === '' ? data : { ...data, text: `${added}${data.text ?? ''}` }),
    );
  };
}

/**
 * SGLang's `/generate` with `return_logprob`: each answer's (each element's, for a batch)
 * `meta_info` input logprob lists (`input_token_logprobs`, `input_top_logprobs`, and the
 * others named `input_*logprob*`) begin with prefill's, as `mini_lb.py` and smg merge them;
 * decode's own are empty. A list decode did not send at all is set to prefill's.
 */
function mergeInputLogprobs(prefill: EngineItem | undefined): ((item: EngineItem) => EngineItem) | undefined {
  const answer = bodyOf(prefill);
  const elements = Array.isArray(answer) ? answer : answer === undefined ? [] : [answer];
  const inputs = elements.map((element) => {
    const meta = (element as { meta_info?: unknown } | null)?.meta_info;
    const lists: Record<string, unknown[]> = {};
    if (typeof meta === 'object' && meta !== null) {
      for (const [key, value] of Object.entries(meta)) {
        if (key.startsWith('input_') && key.includes('logprob') && Array.isArray(value)) lists[key] = value;
      }
    }
    return lists;
  });
  if (inputs.every((lists) => Object.keys(lists).length === 0)) return undefined;
  const patchElement = (element: unknown, position: number): unknown => {
    if (typeof element !== 'object' || element === null) return element;
    const json = element as Json;
    const index = typeof json.index === 'number' ? json.index : position;
    const lists = inputs[index];
    const meta = json.meta_info;
    if (lists === undefined || Object.keys(lists).length === 0 || typeof meta !== 'object' || meta === null) {
      return element;
    }
    const merged: Json = { ...(meta as Json) };
    for (const [key, value] of Object.entries(lists)) {
      const own = merged[key];
      merged[key] = Array.isArray(own) ? [...value, ...own] : value;
    }
    return { ...json, meta_info: merged };
  };
  // What it cannot place, or has nothing for, stays as the worker wrote it.
  return (item) =>
    patchItem(item, (json) => {
      if (Array.isArray(json)) {
        const elements = json.map(patchElement);
        return elements.some((element, i) => element !== json[i]) ? [elements as unknown as Json] : undefined;
      }
      const element = patchElement(json, 0);
      return element === json ? undefined : [element as Json];
    });
}
