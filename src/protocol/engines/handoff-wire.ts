// What the transport and the request check read of every engine's handoff: the request fields
// only the router may set, and the handoff parameters of a prefill answer. Over the one list of
// engines (`wires.ts`), below the flow and the transport.
import type { EngineHandoff } from './engine-handoff.js';
import { ENGINE_WIRES } from './wires.js';

function union(pick: (handoff: EngineHandoff) => readonly string[]): readonly string[] {
  return Object.freeze([...new Set(ENGINE_WIRES.flatMap((wire) => pick(wire.handoff)))]);
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
