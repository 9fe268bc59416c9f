import type { EngineHandoff } from './engine-handoff.js';
import { sglangHandoff } from './sglang/handoff.js';
import { trtllmHandoff } from './trtllm/handoff.js';
import { vllmHandoff } from './vllm/handoff.js';

// A leaf the transport may import: the handoffs only, not the connectors (which need flow/).
// test/engines/registry.test.ts holds this list equal to the registry's.
/** Every engine's handoff, in the registry's order. */
export const ENGINE_HANDOFFS: readonly EngineHandoff[] = Object.freeze([vllmHandoff, sglangHandoff, trtllmHandoff]);

function union(pick: (handoff: EngineHandoff) => readonly string[]): readonly string[] {
  return Object.freeze([...new Set(ENGINE_HANDOFFS.flatMap(pick))]);
}

/** The request fields that only the router may set, over every engine. */
export const REQUEST_HANDOFF_FIELDS = union((each) => each.requestFields);
const ANSWER_FIELDS = union((each) => each.answerFields);
const CHOICE_FIELDS = union((each) => each.choiceFields);

type Json = Record<string, unknown>;

function firstOf(json: Json | undefined, fields: readonly string[]): unknown {
  if (json === undefined) return undefined;
  for (const field of fields) {
    const value = json[field];
    if (value !== undefined && value !== null) return value;
  }
  return undefined;
}

/**
 * The handoff parameters a prefill worker's answer carries, wherever its engine puts them
 * (vLLM's top-level `kv_transfer_params`, TensorRT-LLM's `disaggregated_params` at the top or
 * on the choice); undefined when it carries none.
 */
export function answerHandoff(body: Json, choice: Json | undefined): unknown {
  return firstOf(body, ANSWER_FIELDS) ?? firstOf(choice, CHOICE_FIELDS);
}

/** A prefill answer without the handoff parameters it named: they are the router's business. */
export function withoutAnswerHandoff(json: Json): Json {
  const rest: Json = { ...json };
  for (const field of ANSWER_FIELDS) delete rest[field];
  if (Array.isArray(json.choices) && CHOICE_FIELDS.length > 0) {
    rest.choices = json.choices.map((choice: unknown) => {
      if (typeof choice !== 'object' || choice === null) return choice;
      const kept: Json = { ...(choice as Json) };
      for (const field of CHOICE_FIELDS) delete kept[field];
      return kept;
    });
  }
  return rest;
}
