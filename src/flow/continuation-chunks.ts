// What the client is sent of a migrating request: the original worker's chunks without the
// token ids the router asked for, and a continuation's chunks (a token-id completion) in the
// shape, id and choice of the stream the client is reading, with usage counted once.

import { OPENAI_OBJECTS, type OpenAIShape, streamedChoice } from '../endpoints/openai-shapes.js';
import type { EngineItem } from '../protocol/annotated.js';
import { Annotated, type WireChunk } from '../protocol/annotated.js';
import type { CompletionUsage, LLMEngineOutput } from '../protocol/llm-engine-output.js';

type Json = Record<string, unknown>;

/** What the client's stream looks like, from its first chunk: its id, creation time and model. */
interface Template {
  id: unknown;
  created: unknown;
  model: unknown;
  systemFingerprint: unknown;
}

/**
 * The record of one migrating stream: what was sent to the client (text, token ids, the
 * template of its chunks) and what the workers said of the prompt, from which a continuation
 * is made and its chunks are rewritten.
 *
 * @internal
 */
export class StreamRecord {
  /** The client's answer shape: chat's deltas or completions' texts. */
  readonly #shape: OpenAIShape;
  /** The client asked for token ids itself: they stay in what it is sent. */
  readonly #keepIds: boolean;
  #template: Template | undefined;
  /** The prompt's token ids as the first worker reported them, else as the router's tokenizer made them. */
  promptIds: readonly number[] | undefined;
  /**
   * The token ids generated so far whose text the client has (over every worker). Ids of
   * chunks that said nothing yet (part of a character the detokenizer holds back) wait in
   * `#pendingIds`: a resume generates them again, so that it never starts inside a character.
   */
  readonly generatedIds: number[] = [];
  #pendingIds: number[] = [];
  /** The text sent to the client so far. */
  delivered = '';
  /** A chunk came without its token ids (a worker that does not return them). */
  missingIds = false;
  /** The output is in a part the chat server parses (reasoning, a tool call). */
  parsed: string | undefined;
  /** A finish was sent: the stream is complete whatever follows. */
  finished = false;
  /** The prompt tokens the client's usage counts (the continuation's prompt holds more). */
  #promptTokens: number | undefined;
  /** Tokens counted before the current continuation (what its prompt added to the client's). */
  #carried = 0;
  /** Text the current continuation repeats before it says anything new (a replay). */
  #skip = '';

  constructor(route: 'chat' | 'completions', keepIds: boolean, promptIds?: readonly number[]) {
    this.#shape = route === 'chat' ? 'chat' : 'text';
    this.#keepIds = keepIds;
    this.promptIds = promptIds;
  }

  /** An item of the first worker's stream, as the client gets it. */
  original(item: EngineItem): EngineItem {
    const wire = Annotated.wire(item);
    if (wire !== undefined) {
      for (const chunk of wire) this.#learn(chunk.json);
    }
    this.#note(item);
    if (this.#keepIds || wire === undefined) return item;
    return Annotated.withWire(item, wire.map(withoutIds));
  }

  /**
   * A continuation begins: `resume` continues after the tokens generated so far (its prompt
   * holds them), `replay` starts again from the prompt, and the text the client already has
   * is skipped.
   */
  continueAs(kind: 'resume' | 'replay'): void {
    this.#carried = kind === 'resume' ? this.generatedIds.length : 0;
    this.#skip = kind === 'replay' ? this.delivered : '';
    this.#pendingIds = [];
    if (kind === 'replay') this.generatedIds.length = 0;
  }

  /**
   * An item of a continuation, as the client gets it: undefined for one that only repeats what
   * the client has. Throws when a replay does not repeat it (sampling that is not reproducible).
   */
  continued(item: EngineItem): EngineItem | undefined {
    const data = item.data;
    if (data === undefined || data === null) return item;
    let text = typeof data.text === 'string' ? data.text : '';
    if (this.#skip !== '') {
      const shared = Math.min(text.length, this.#skip.length);
      if (text.slice(0, shared) !== this.#skip.slice(0, shared) || (shared < this.#skip.length && isFinish(data))) {
        throw new Error('the continuation does not repeat what the client was sent (sampling is not reproducible)');
      }
      this.#skip = this.#skip.slice(shared);
      text = text.slice(shared);
    }
    this.#count(data.token_ids, text);
    if (isFinish(data)) this.finished = true;
    // Said nothing new (a chat's role chunk, a repeated part): the client has it already.
    if (text === '' && !isFinish(data) && data.completion_usage == null) return undefined;
    const usage = data.completion_usage == null ? undefined : this.#usage(data.completion_usage);
    const out: EngineItem = {
      ...item,
      data: {
        ...(data as LLMEngineOutput),
        text,
        index: 0,
        ...(usage === undefined ? {} : { completion_usage: usage }),
      },
    };
    const wire = Annotated.wire(item) ?? [];
    return Annotated.withWire(
      out,
      wire.map((chunk) => this.#rewrite(chunk, text, usage)),
    );
  }

  /**
   * The end of a stream that broke after its last token but before its finish: every token of
   * the budget was generated, so the engine could only have finished with `length`. The usage
   * chunk too when `withUsage` (the client asked for one): the client's prompt, every token once.
   */
  lengthFinish(withUsage: boolean): EngineItem {
    const template = this.#template;
    const head: Json = {
      id: template?.id,
      object: OPENAI_OBJECTS[this.#shape].chunk,
      created: template?.created,
      model: template?.model,
      ...(template?.systemFingerprint === undefined ? {} : { system_fingerprint: template.systemFingerprint }),
    };
    const choice = streamedChoice(this.#shape, 0, '', 'length');
    const prompt = this.promptIds?.length ?? 0;
    const completion = this.generatedIds.length;
    const usage: CompletionUsage = {
      prompt_tokens: prompt,
      completion_tokens: completion,
      total_tokens: prompt + completion,
    };
    const chunks: WireChunk[] = [{ form: 'event', text: undefined, json: { ...head, choices: [choice] } }];
    if (withUsage) chunks.push({ form: 'event', text: undefined, json: { ...head, choices: [], usage } });
    this.finished = true;
    return Annotated.withWire(
      Annotated.fromData<LLMEngineOutput>({
        token_ids: [],
        text: '',
        index: 0,
        finish_reason: 'length',
        ...(withUsage ? { completion_usage: usage } : {}),
      }),
      chunks,
    );
  }

  #learn(json: Json): void {
    if (this.#template === undefined && json.id !== undefined) {
      this.#template = {
        id: json.id,
        created: json.created,
        model: json.model,
        systemFingerprint: json.system_fingerprint,
      };
    }
    const choice = (Array.isArray(json.choices) ? json.choices[0] : undefined) as Json | undefined;
    const prompt = json.prompt_token_ids ?? choice?.prompt_token_ids;
    // The engine's own ids win over the router's tokenizer's: they are what it computed.
    if (Array.isArray(prompt)) this.promptIds = prompt as number[];
    const delta = choice?.delta as Json | undefined;
    if (delta === undefined) return;
    if (Array.isArray(delta.tool_calls) && delta.tool_calls.length > 0) this.parsed = 'a tool call';
    else if (isText(delta.reasoning_content) || isText(delta.reasoning)) this.parsed = 'reasoning';
    else if (isText(delta.content) && this.parsed === 'reasoning') this.parsed = undefined;
  }

  #note(item: EngineItem): void {
    const data = item.data;
    if (data === undefined || data === null) return;
    const text = typeof data.text === 'string' ? data.text : '';
    if (data.token_ids.length === 0 && text !== '') this.missingIds = true;
    this.#count(data.token_ids, text);
    if (isFinish(data)) this.finished = true;
  }

  /** Text sent and the ids behind it; ids without text wait for the text that completes them. */
  #count(ids: readonly number[], text: string): void {
    if (text === '') {
      this.#pendingIds.push(...ids);
      return;
    }
    this.generatedIds.push(...this.#pendingIds, ...ids);
    this.#pendingIds = [];
    this.delivered += text;
  }

  /** The client's usage of a continuation's: its prompt is the client's, every token counted once. */
  #usage(usage: CompletionUsage): CompletionUsage {
    const prompt = this.#promptTokens ?? this.promptIds?.length ?? usage.prompt_tokens - this.#carried;
    this.#promptTokens = prompt;
    const completion = usage.completion_tokens + this.#carried;
    const { prompt_tokens_details: _details, ...rest } = usage;
    return { ...rest, prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion };
  }

  /** A continuation's chunk (a completion's) in the client's stream: its id, choice and shape. */
  #rewrite(chunk: WireChunk, text: string, usage: CompletionUsage | undefined): WireChunk {
    const { json } = chunk;
    const template = this.#template;
    const head: Json = {
      id: template?.id ?? json.id,
      object: OPENAI_OBJECTS[this.#shape].chunk,
      created: template?.created ?? json.created,
      model: template?.model ?? json.model,
      ...(template?.systemFingerprint === undefined ? {} : { system_fingerprint: template.systemFingerprint }),
    };
    const choices = (Array.isArray(json.choices) ? json.choices : []) as Json[];
    const rewritten: Json = {
      ...head,
      choices: choices.slice(0, 1).map((choice) => {
        const ids = this.#keepIds && Array.isArray(choice.token_ids) ? { token_ids: choice.token_ids } : {};
        const finish = choice.finish_reason ?? null;
        const stop = choice.stop_reason === undefined ? {} : { stop_reason: choice.stop_reason };
        return streamedChoice(this.#shape, 0, text, finish, { extra: { ...stop, ...ids } });
      }),
    };
    if (json.usage !== undefined && json.usage !== null) rewritten.usage = usage ?? json.usage;
    return { form: chunk.form, text: undefined, json: rewritten };
  }
}

const isText = (value: unknown) => typeof value === 'string' && value !== '';

const isFinish = (data: LLMEngineOutput) => data.finish_reason !== undefined && data.finish_reason !== null;

/** A worker's chunk without the token ids the router asked for (the client did not). */
function withoutIds(chunk: WireChunk): WireChunk {
  const { json } = chunk;
  const choices = Array.isArray(json.choices) ? (json.choices as Json[]) : undefined;
  const asked =
    'prompt_token_ids' in json || choices?.some((choice) => 'token_ids' in choice || 'prompt_token_ids' in choice);
  if (asked !== true) return chunk;
  const { prompt_token_ids: _prompt, ...rest } = json;
  return {
    ...chunk,
    text: undefined,
    json: {
      ...rest,
      ...(choices === undefined
        ? {}
        : {
            choices: choices.map(({ token_ids: _ids, prompt_token_ids: _promptIds, ...choice }) => choice),
          }),
    },
  };
}
