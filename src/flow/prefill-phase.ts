import type { PrefillTask } from '../handoff/prefill-task.js';

/**
 * Where the prefill leg stands. `reading`: the flow reads its answer itself (the sequential
 * family, and every family until the first output); `background`: a {@link PrefillTask} owns
 * it (concurrent and early families), and the task's own state says whether it still runs, so
 * that it is never kept twice; `done` and `failed`: it is over, once, with its lease released.
 *
 * @internal
 */
export type PrefillPhase =
  | { readonly kind: 'idle' }
  | { readonly kind: 'reading' }
  | { readonly kind: 'background'; readonly task: PrefillTask }
  | { readonly kind: 'done' }
  | { readonly kind: 'failed' };

/** @internal What happens to the prefill leg: it is sent, handed to a background task, or over. */
export type PrefillEvent =
  | { readonly kind: 'dispatched' }
  | { readonly kind: 'handed'; readonly task: PrefillTask }
  | { readonly kind: 'ended'; readonly failed: boolean };

/**
 * The one transition function of {@link PrefillPhase}. An end is final: what ended stays
 * ended, whatever comes after (a task's outcome reported late, a second end).
 *
 * @internal
 */
export function nextPrefill(phase: PrefillPhase, event: PrefillEvent): PrefillPhase {
  if (phase.kind === 'done' || phase.kind === 'failed') return phase;
  switch (event.kind) {
    case 'dispatched':
      return phase.kind === 'idle' ? { kind: 'reading' } : phase;
    case 'handed':
      return { kind: 'background', task: event.task };
    case 'ended':
      return { kind: event.failed ? 'failed' : 'done' };
  }
}

/** @internal Whether prefill still runs in `phase`. */
export function prefillRunning(phase: PrefillPhase): boolean {
  return phase.kind === 'reading' || (phase.kind === 'background' && phase.task.state === 'pending');
}

/** @internal Whether prefill has failed in `phase` (a background task's failure counts at once). */
export function prefillFailed(phase: PrefillPhase): boolean {
  return phase.kind === 'failed' || (phase.kind === 'background' && phase.task.state === 'failed');
}
