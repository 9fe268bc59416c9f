// One request's work on one simulated engine, and what the engine tells its owner as it goes.

import type { KvNode } from './kv-tree.js';

/**
 * What a simulated engine is asked to do with a request:
 * - `prefill`: compute its prompt and stop (the prefill leg of a disaggregated request; its
 *   KV stays held until {@link SimEngine.released} says the decode side has it);
 * - `decode`: receive its prompt's KV from a prefill worker, then decode its answer;
 * - `whole`: compute its prompt and decode its answer (served on decode alone, or by an
 *   aggregated worker).
 */
export type JobKind = 'prefill' | 'decode' | 'whole';

/** What the owner of a job hears from the engine, each at the virtual time it happens. */
export interface JobListener {
  /**
   * It starts on the engine: `cachedTokens` of its prompt were found in the cache (a decode
   * job: those not sent over the link).
   */
  admitted?(at: number, cachedTokens: number): void;
  /** A decode job's KV has arrived from the prefill worker (which may now let go of it). */
  received?(at: number): void;
  /** The prompt is computed (a `prefill` job: its KV is ready to be sent). */
  prefilled?(at: number): void;
  /** A token of the answer, `index` from 0. */
  token?(at: number, index: number): void;
  /** The job is over (its last token sent, or its prompt computed for `prefill`). */
  done?(at: number): void;
}

/** A request as an engine takes it. */
export interface JobRequest {
  /** The prompt's blocks (the trace's hashes of 512-token blocks). */
  readonly blocks: readonly number[];
  readonly inputTokens: number;
  /** Tokens of the answer this engine decodes (none for `prefill`). */
  readonly outputTokens: number;
  readonly kind: JobKind;
}

/** Where a job is on its engine. */
export type JobPhase =
  | 'waiting' // queued to be computed (or, for `decode`, for its KV blocks)
  | 'transferring' // its KV on the way from the prefill worker
  | 'ready' // its KV received, waiting for a place among the running
  | 'running' // computing its prompt or decoding
  | 'holding' // a computed prefill, its KV held until the decode side has it
  | 'done';

/** The engine's record of one job. @internal */
export interface Job {
  readonly id: number;
  readonly request: JobRequest;
  readonly listener: JobListener;
  phase: JobPhase;
  /** Prompt blocks held in the cache, in order (the first `nodes.length` of the prompt). */
  nodes: KvNode[];
  /** Tokens computed (or found cached) so far, prompt then answer. */
  computed: number;
  /** Tokens to compute before decoding: the prompt, plus the answer so far after a preemption. */
  target: number;
  /** Tokens of the answer produced. */
  generated: number;
  /** GPU blocks it holds outside the cache's nodes. */
  privateUnits: number;
  /** Prompt tokens found cached when it was first admitted, for the hit rate; undefined until then. */
  cachedAtAdmission: number | undefined;
  /** Times it was preempted. */
  preemptions: number;
  /** Its caller left while its KV was on the way: it ends once the transfer lands. */
  cancelled: boolean;
}
