/**
 * Where one engine's handoff travels on the wire, as data: the request fields only the router
 * may set (a client's are refused), and where a prefill worker's answer carries the handoff
 * parameters (top-level fields of the body, fields of its first choice). The transport reads
 * the parameters with {@link answerHandoff}; the flow strips them from a finished prefill
 * answer with {@link withoutAnswerHandoff}; the request check refuses {@link HANDOFF_FIELDS}.
 */
export interface EngineHandoff {
  /** Request fields that steer the engine's KV handoff. */
  readonly requestFields: readonly string[];
  /** Top-level fields of a prefill answer that carry the handoff parameters, in priority order. */
  readonly answerFields: readonly string[];
  /** Fields of a prefill answer's choice that carry them, read after {@link answerFields}. */
  readonly choiceFields: readonly string[];
}

/** Freezes a handoff description (and its lists): they are shared by every request. */
export function engineHandoff(handoff: EngineHandoff): EngineHandoff {
  return Object.freeze({
    requestFields: Object.freeze([...handoff.requestFields]),
    answerFields: Object.freeze([...handoff.answerFields]),
    choiceFields: Object.freeze([...handoff.choiceFields]),
  });
}
