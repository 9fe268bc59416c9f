import type { Logger } from '../runtime/logger.js';

/** How a request was served. */
export type Strategy = 'sequential' | 'concurrent' | 'early' | 'aggregated';

/** Which leg an error came from. */
export type Leg = 'prefill' | 'decode';

/** What every event carries. */
export interface FlowEventBase {
  /** The client's request id (both legs use it). */
  requestId: string;
  /** Milliseconds since `disaggregate` was called (`performance.now()` based). */
  elapsedMs: number;
  /** True for an event that came after the `finished` event (the client stream had ended). */
  late: boolean;
}

/**
 * One step in the life of a request, in the order they can happen. Exactly one `finished`
 * per request; `settled` is always the last event (every leg is over, clean-ups included).
 *
 * - `routed`: the strategy and the chosen workers (before anything is dispatched), and for an
 *   aggregated request why;
 * - `prefillDispatched`, `prefillFirstOutput`, `prefillCompleted`, `prefillFailed`;
 * - `handoff`: decode has what it needs from prefill (the parameters, or the rendezvous);
 * - `decodeDispatched`, `decodeOpened` (its stream is there), `kvClaimed` (decode answered
 *   for the first time, so it has taken the KV), `firstToken` (first item to the client);
 * - `decodeRetried`: a sequential decode that could not be reached is sent again, with the
 *   same handoff, to `decodeWorker` after `delayMs` (see `retryDecode`);
 * - `prefillRetried`: the request failed before its client stream existed and runs again
 *   from the start after `delayMs` (see `retryPrefill`), passing over the worker of the `leg`
 *   that failed; a `routed` event and the rest follow for the new attempt;
 * - `terminalHeld` / `terminalReleased`: decode finished before prefill did, and waited;
 * - `cleanupExpired`: the client had gone and decode did not take the KV within the clean-up
 *   budget: an orphaned handoff;
 * - `handoffReleased`: prefill's worker holds KV for a decode that will not come (vLLM does:
 *   prefill finished the request at its first token, or the decode worker given the handoff
 *   could not be reached and no retry followed), and the connector's release call went to a
 *   decode worker:
 *   `freed` when that worker's request handler answered it (vLLM 0.21 and later then free the
 *   KV at once), else the `error` (the KV waits for the engine's lease);
 * - `migration`: a decode stream broke after its first token and, with migration on, was
 *   continued on another worker (`migrated`), or not (`refused`, `failed`, with why);
 * - `finished`: the client stream's one outcome, with the workers that served it;
 * - `settled`: nothing more will happen for this request.
 */
export type FlowEvent<P = unknown, D = unknown> = FlowEventBase &
  (
    | {
        type: 'routed';
        strategy: Strategy;
        /** Why a request is served aggregated: `skipPrefill`'s reason, or `no-prefill-worker`. */
        reason?: string | undefined;
        prefillWorker?: P | undefined;
        decodeWorker?: D | undefined;
        /** The prompt tokens the prefill pool's policy expected its worker to hold cached (precise-prefix). */
        predictedCachedTokens?: number | undefined;
      }
    | { type: 'prefillDispatched' }
    | { type: 'prefillFirstOutput' }
    | { type: 'handoff'; handoff: 'params' | 'bootstrap' }
    | { type: 'prefillCompleted' }
    | { type: 'prefillFailed'; error: Error }
    | { type: 'decodeDispatched' }
    | {
        type: 'decodeRetried';
        attempt: number;
        error: Error;
        delayMs: number;
        /** The next decode worker, given the same handoff. */
        decodeWorker?: D | undefined;
        /** The decode worker that could not take it (the error's). */
        fromWorker?: D | undefined;
      }
    | {
        type: 'prefillRetried';
        attempt: number;
        error: Error;
        delayMs: number;
        /** The leg that failed, when it is one's. */
        leg?: Leg | undefined;
        /** The workers of the attempt that failed. */
        prefillWorker?: P | undefined;
        decodeWorker?: D | undefined;
      }
    | { type: 'decodeOpened' }
    | { type: 'kvClaimed' }
    | { type: 'firstToken' }
    | { type: 'terminalHeld' }
    | { type: 'terminalReleased'; heldMs: number }
    | { type: 'cleanupExpired'; error: Error }
    | { type: 'handoffReleased'; freed: boolean; error?: Error | undefined }
    | {
        type: 'migration';
        /** 1 for the request's first break, 2 for a break of its first continuation, and so on. */
        attempt: number;
        reason: 'stream_error' | 'idle' | 'worker_down';
        /** `migrated`: continued on `toWorker`; `refused`: not continued (`why`); `failed`: the continuation could not start (`why`). */
        outcome: 'migrated' | 'refused' | 'failed';
        why?: string | undefined;
        /** How the continuation goes on: after the generated tokens (`resume`) or from the prompt again (`replay`). */
        mode?: 'resume' | 'replay' | undefined;
        error: Error;
        /** The tokens generated before the break (whose text the client has). */
        generatedTokens: number;
        fromWorker?: D | undefined;
        toWorker?: D | undefined;
      }
    | {
        type: 'finished';
        outcome: 'success' | 'error' | 'cancelled';
        leg?: Leg | undefined;
        error?: Error | undefined;
        /**
         * The workers that served the request in the end: those `routed` named, the decode
         * worker after a `decodeRetried` or a `migration` that went on, so that a listener
         * (health, metrics) needs no state of its own to charge the outcome.
         */
        prefillWorker?: P | undefined;
        decodeWorker?: D | undefined;
      }
    | { type: 'settled' }
  );

/** The type of one event, by its `type` (and the types of the workers, for `routed`). */
export type FlowEventOf<K extends FlowEvent['type'], P = unknown, D = unknown> = Extract<FlowEvent<P, D>, { type: K }>;

/**
 * Receives the events of a request, synchronously, in order. What it throws is logged and
 * ignored. `P` and `D` are the types of the prefill and decode workers (`routed` names them).
 */
export type FlowEventListener<P = unknown, D = unknown> = (event: FlowEvent<P, D>) => void;

type Payload = FlowEvent extends infer E ? (E extends FlowEvent ? Omit<E, keyof FlowEventBase> : never) : never;

/**
 * The event log of one request: stamps events, marks late ones, keeps `finished` to one and
 * emits `settled` once every part that asked to be waited for is over.
 *
 * @internal
 */
export class FlowRecorder {
  readonly #requestId: string;
  readonly #listener: FlowEventListener | undefined;
  readonly #logger: () => Logger;
  readonly #start = performance.now();
  #finished = false;
  #settled = false;
  /** Parts still running (the client stream, the prefill leg, the decode leg). */
  #open = 0;
  /** The workers serving the request now, for `finished`. */
  #prefillWorker: unknown;
  #decodeWorker: unknown;

  constructor(requestId: string, listener: FlowEventListener | undefined, logger: () => Logger) {
    this.#requestId = requestId;
    this.#listener = listener;
    this.#logger = logger;
  }

  get finished(): boolean {
    return this.#finished;
  }

  /** Milliseconds since the request started. */
  elapsed(): number {
    return performance.now() - this.#start;
  }

  emit(event: Payload): void {
    if (this.#listener === undefined || this.#settled) return;
    // Object.assign, not a spread: one site copies events of a dozen shapes, and Node 20's V8
    // copies such a megamorphic spread on a slow path (about 4.5 µs an event here, 0.2 with
    // assign; Node 24 is fast either way): 1 % of the proxy's CPU at 50 streams in flight.
    const stamped = Object.assign({}, event, {
      requestId: this.#requestId,
      elapsedMs: this.elapsed(),
      late: this.#finished && event.type !== 'settled',
    }) as FlowEvent;
    this.#follow(stamped);
    try {
      this.#listener(stamped);
    } catch (error) {
      this.#logger().warn({ err: error, event: event.type }, 'A flow event listener threw; ignored');
    }
  }

  /** Which workers serve the request now: routed, then moved by a decode retry or a migration. */
  #follow(event: FlowEvent): void {
    if (event.type === 'routed') {
      this.#prefillWorker = event.prefillWorker;
      this.#decodeWorker = event.decodeWorker;
    } else if (event.type === 'decodeRetried' && event.decodeWorker !== undefined) {
      this.#decodeWorker = event.decodeWorker;
    } else if (event.type === 'migration' && event.toWorker !== undefined) {
      this.#decodeWorker = event.toWorker;
    }
  }

  /** Emits the one `finished` event; later calls do nothing. */
  finish(outcome: FlowEventOf<'finished'>['outcome'], leg?: Leg, error?: Error): void {
    if (this.#finished) return;
    this.emit({
      type: 'finished',
      outcome,
      ...(leg === undefined ? {} : { leg }),
      ...(error === undefined ? {} : { error }),
      ...(this.#prefillWorker === undefined ? {} : { prefillWorker: this.#prefillWorker }),
      ...(this.#decodeWorker === undefined ? {} : { decodeWorker: this.#decodeWorker }),
    });
    this.#finished = true;
    this.#maybeSettle();
  }

  /** A part that must end before `settled`; call the returned function once when it has. */
  hold(): () => void {
    this.#open++;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.#open--;
      this.#maybeSettle();
    };
  }

  #maybeSettle(): void {
    if (this.#open > 0 || this.#settled) return;
    // Settled only after the one outcome: a part that ends first waits for the others.
    if (!this.#finished) return;
    this.emit({ type: 'settled' });
    this.#settled = true;
  }
}
