import { FAILURE_RULES } from '../protocol/failure-rules.js';
import { findCause } from '../util/cause-chain.js';
import { ignore } from '../util/close-quietly.js';
import { describeValue } from '../util/describe-value.js';
import { branded, DisaggError } from '../util/disagg-error.js';

/**
 * The budgets of one request, in milliseconds. Each is optional; an absent budget never
 * expires. What each one measures:
 * - `totalMs`: from the call of `disaggregate` to the end of the client stream;
 * - `prefillFirstOutputMs`: from the prefill dispatch to prefill's first output;
 * - `handoffMs`: from prefill's first output (or, with a rendezvous, from sending both legs)
 *   until the handoff is done: prefill has completed and decode's stream is open (the window
 *   in which one worker holds KV for the other);
 * - `decodeFirstTokenMs`: how long decode may take to answer the call (a worker that never
 *   sends its headers), and then how long the first read of its stream may wait;
 * - `idleMs`: how long each later read may wait for decode's next item.
 *
 * The decode budgets count only time spent waiting on decode, never time the client takes
 * between reads, so a slow reader is not mistaken for a stuck worker.
 */
export interface Deadlines {
  totalMs?: number | undefined;
  prefillFirstOutputMs?: number | undefined;
  handoffMs?: number | undefined;
  decodeFirstTokenMs?: number | undefined;
  idleMs?: number | undefined;
}

/** The phase whose budget ran out: the key of {@link Deadlines} without `Ms`. */
export type DeadlinePhase = 'total' | 'prefillFirstOutput' | 'handoff' | 'decodeFirstToken' | 'idle';

const PHASES: readonly DeadlinePhase[] = ['total', 'prefillFirstOutput', 'handoff', 'decodeFirstToken', 'idle'];

const PHASE_TEXT: Record<DeadlinePhase, string> = {
  total: 'the request',
  prefillFirstOutput: "prefill's first output",
  handoff: 'the handoff from prefill to decode',
  decodeFirstToken: "decode's first token",
  idle: "decode's next item",
};

const LEG_OF: Record<DeadlinePhase, 'prefill' | 'decode'> = {
  total: 'decode',
  prefillFirstOutput: 'prefill',
  handoff: 'prefill',
  decodeFirstToken: 'decode',
  idle: 'decode',
};

/**
 * A budget of {@link Deadlines} ran out. `phase` names it, `budgetMs` says what it was; the
 * message says both. A deadline is the router's decision, so the leg it stopped is stopped
 * for good, and it is not retried (`retryable` is false, as the failure rules say: another
 * attempt would add its wait to the one the client already had).
 *
 * @example
 * for await (const item of stream) {
 *   const error = Annotated.err(item);
 *   if (DeadlineError.is(error) && error.phase === 'idle') metrics.stuckDecode.inc();
 * }
 */
export class DeadlineError extends DisaggError {
  static override readonly is = branded<DeadlineError>('DeadlineError');
  declare readonly code: 'DISAGG_DEADLINE_EXCEEDED';
  readonly kind = 'deadline';
  readonly phase: DeadlinePhase;
  readonly budgetMs: number;
  /** The leg that was late: prefill's phases, decode's, and for `total` the one still running. */
  readonly leg: 'prefill' | 'decode';
  /** False: a deadline is not retried (`FAILURE_RULES.deadline`). */
  readonly retryable: boolean = FAILURE_RULES.deadline.retry;

  constructor(phase: DeadlinePhase, budgetMs: number, leg: 'prefill' | 'decode' = LEG_OF[phase]) {
    super(
      'DISAGG_DEADLINE_EXCEEDED',
      `Deadline exceeded: ${PHASE_TEXT[phase]} took longer than its budget of ${budgetMs} ms (${phase})`,
    );
    this.phase = phase;
    this.budgetMs = budgetMs;
    this.leg = leg;
  }
}

/** The first `DeadlineError` in an error's cause chain (how a deadline reaches prefill's error). */
export function deadlineIn(error: unknown): DeadlineError | undefined {
  return findCause(error, DeadlineError.is);
}

/**
 * Checks a `deadlines` option and returns it frozen.
 *
 * @throws {TypeError} for anything but an object of positive finite numbers under the known keys.
 */
export function checkDeadlines(value: unknown): Readonly<Deadlines> {
  if (value === undefined) return DEFAULT_DEADLINES;
  if (typeof value !== 'object' || value === null) {
    throw new TypeError(`deadlines must be an object of millisecond budgets, got ${describeValue(value)}`);
  }
  const known = new Set(PHASES.map((phase) => `${phase}Ms`));
  const active: Record<string, number> = { ...DEFAULT_DEADLINES };
  for (const [key, budget] of Object.entries(value)) {
    if (!known.has(key)) {
      throw new TypeError(`Unknown deadline ${JSON.stringify(key)}: expected one of ${[...known].join(', ')}`);
    }
    if (budget === undefined) continue;
    if (budget !== 0 && !isBudget(budget)) {
      throw new TypeError(
        `deadlines.${key} must be a positive number of milliseconds, or 0 for none, got ${describeValue(budget)}`,
      );
    }
    if (budget === 0) delete active[key];
    else active[key] = budget;
  }
  return Object.freeze(active as Deadlines);
}

/**
 * The deadlines of a request when none are given (`disaggregate`'s and `disagg serve`'s): each
 * ends a hang of its phase, none cuts a legitimate request. A prompt of a million tokens takes
 * minutes to prefill, so prefill has ten; the handoff (which with SGLang's rendezvous includes
 * prefill's computing, as decode waits at the rendezvous meanwhile) as long; decode five
 * minutes to answer and give its first token (its queue under load), then two minutes at most
 * between two items. No total: a long answer is not a hang, and every wait of a request is
 * covered by one of these. Given deadlines replace these one by one; `0` turns one off.
 *
 * @example
 * disaggregate({ ...options, deadlines: { idleMs: 30_000, handoffMs: 0 } }); // idle 30 s, no handoff budget, the rest as here
 */
export const DEFAULT_DEADLINES: Readonly<Required<Omit<Deadlines, 'totalMs'>>> = Object.freeze({
  prefillFirstOutputMs: 600_000,
  handoffMs: 600_000,
  decodeFirstTokenMs: 300_000,
  idleMs: 120_000,
});

/**
 * Checks a budget in milliseconds.
 *
 * @throws {TypeError} naming `option` for anything but a positive finite number.
 */
export function checkBudget(option: string, value: unknown, fallback: number): number {
  if (value === undefined) return fallback;
  if (!isBudget(value)) {
    throw new TypeError(`${option} must be a positive number of milliseconds, got ${describeValue(value)}`);
  }
  return value;
}

/**
 * Waits `ms` (a backoff, which is work: the timer keeps the process alive); `cancel()` clears
 * the timer and leaves the promise pending, for a waiter that stopped waiting.
 */
export function pause(ms: number): { done: Promise<void>; cancel: () => void } {
  let cancel: () => void = ignore;
  const done = new Promise<void>((resolve) => {
    cancel = startTimer(ms, resolve, true);
  });
  return { done, cancel };
}

function isBudget(value: unknown): value is number {
  return typeof value === 'number' && Number.isFinite(value) && value > 0;
}

/**
 * Calls `expire` after `ms` unless cancelled first; returns the cancel function (idempotent).
 * The timer does not keep the process alive (a deadline is a guard, not work) unless
 * `keepsAlive` (a backoff before work to do).
 */
export function startTimer(ms: number | undefined, expire: () => void, keepsAlive = false): () => void {
  if (ms === undefined) return ignore; // nothing to cancel
  const timer = setTimeout(expire, ms);
  if (!keepsAlive) timer.unref?.();
  return () => clearTimeout(timer);
}
