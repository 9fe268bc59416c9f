/**
 * An executable model of rules 1-14 (../shared/spec/handoff.md): given when each thing
 * happens, what the consumer of forwardDecode must see.
 *
 * Every event has its own time (no two at once), and the consumer pulls before the next event,
 * so each race has exactly one right answer. Ties are the job of the biased-race tests. A
 * consumer with several calls in flight gets the same items, one per call in call order,
 * then `done` for every later call.
 */

export type DecodeEvent =
  | 'token'
  | 'annotation'
  | 'no-data'
  | 'eos'
  | 'length'
  | 'stop'
  | 'content_filter'
  | 'error-item'
  | 'finish-error'
  | 'cancelled'
  | 'end'
  | 'throw';

export interface Schedule {
  /** When prefill settles (null: never), and how. */
  prefill: { ok: boolean; at: number | null };
  /** When the decode dispatch settles (null: never), and how. */
  dispatch: { ok: boolean; at: number | null };
  /** What decode produces, in order; times strictly increasing. */
  decode: Array<{ event: DecodeEvent; at: number }>;
  /** Stop after this many items (null: read to the end), by `return()` or by `throw()`. */
  consumer: { stopAfter: number | null; by: 'return' | 'throw' };
  /**
   * How the consumer reads: up to `inFlight` `next()` calls at once. Each answer and each event
   * lets the next entry of `plan` go: `calls` more calls, the first `depth` microtasks later
   * (the plan is used in turn). What the stream delivers does not depend on it: the i-th call
   * gets the i-th item.
   */
  reader: { inFlight: 1 | 2 | 3; plan: Array<{ calls: number; depth: number }> };
}

/** What the consumer sees: decode item indexes, or 'P' for the prefill error item. */
export type Output = number | 'P';

export interface Expectation {
  /** How the forwardDecode call itself ends. */
  call: 'stream' | 'prefill-error' | 'dispatch-error' | 'pending';
  outputs: Output[];
  /** How the stream ends: its end, a decode throw, the consumer, or not at all. */
  end: 'done' | 'decode-throw' | 'consumer' | 'pending' | 'none';
  requestStopped: boolean;
  decodeStopped: boolean;
  /** Whether the decode iterator's return() was called. */
  decodeClosed: boolean;
  /** Whether the dispatch's abort signal fired. */
  dispatchAborted: boolean;
}

const FLOWING = new Set<DecodeEvent>(['token', 'annotation', 'no-data']);
const FAILING = new Set<DecodeEvent>(['error-item', 'finish-error', 'cancelled']);
const TERMINAL = new Set<DecodeEvent>(['eos', 'length', 'stop', 'content_filter']);

/** One step of the stream, before the consumer's own stop is applied. */
interface Trace {
  outputs: Output[];
  end: 'done' | 'decode-throw' | 'pending';
  /** Output index at which the prefill error stops both contexts, if it does. */
  stopsAt: number | null;
  /** Whether the stream's own ending (not the consumer's) closes the decode iterator. */
  closes: boolean;
  /** Decode reported its end (or threw) before output number `sourceDoneAfter` was delivered. */
  sourceDoneAfter: number | null;
}

/** Decode read unchanged from `from` on (rules 6 and 10). */
function forward(decode: Schedule['decode'], from: number, outputs: Output[]): Trace {
  for (let i = from; i < decode.length; i++) {
    const { event } = decode[i] as { event: DecodeEvent };
    if (event === 'end') return { outputs, end: 'done', stopsAt: null, closes: false, sourceDoneAfter: outputs.length };
    if (event === 'throw') {
      return { outputs, end: 'decode-throw', stopsAt: null, closes: false, sourceDoneAfter: outputs.length };
    }
    outputs.push(i);
  }
  return { outputs, end: 'pending', stopsAt: null, closes: false, sourceDoneAfter: null };
}

/** The wrapped stream while prefill may still be pending (rules 9-13). */
function guarded(s: Schedule): Trace {
  const prefillAt = s.prefill.at ?? Number.POSITIVE_INFINITY;
  const outputs: Output[] = [];
  const failPrefill = (sourceDone: boolean): Trace => {
    outputs.push('P');
    return {
      outputs,
      end: 'done',
      stopsAt: outputs.length - 1,
      closes: !sourceDone,
      sourceDoneAfter: sourceDone ? outputs.length - 1 : null,
    };
  };
  for (let i = 0; i < s.decode.length; i++) {
    const { event, at } = s.decode[i] as { event: DecodeEvent; at: number };
    if (prefillAt < at) {
      // Prefill settles while the guard waits for this item.
      return s.prefill.ok ? forward(s.decode, i, outputs) : failPrefill(false);
    }
    if (FLOWING.has(event)) {
      outputs.push(i);
      continue;
    }
    if (FAILING.has(event)) {
      outputs.push(i);
      return { outputs, end: 'done', stopsAt: null, closes: true, sourceDoneAfter: null };
    }
    if (event === 'throw') {
      return { outputs, end: 'decode-throw', stopsAt: null, closes: false, sourceDoneAfter: outputs.length };
    }
    // A terminal item or the end: held until prefill settles.
    const isEnd = event === 'end';
    if (prefillAt === Number.POSITIVE_INFINITY) {
      return { outputs, end: 'pending', stopsAt: null, closes: false, sourceDoneAfter: isEnd ? outputs.length : null };
    }
    if (!s.prefill.ok) return failPrefill(isEnd);
    if (TERMINAL.has(event)) outputs.push(i);
    return { outputs, end: 'done', stopsAt: null, closes: !isEnd, sourceDoneAfter: isEnd ? outputs.length : null };
  }
  // Decode has nothing more for now; prefill may still settle.
  if (prefillAt === Number.POSITIVE_INFINITY || s.prefill.ok) {
    return { outputs, end: 'pending', stopsAt: null, closes: false, sourceDoneAfter: null };
  }
  return failPrefill(false);
}

export function expect(s: Schedule): Expectation {
  const prefillAt = s.prefill.at ?? Number.POSITIVE_INFINITY;
  const dispatchAt = s.dispatch.at ?? Number.POSITIVE_INFINITY;
  const none: Expectation = {
    call: 'pending',
    outputs: [],
    end: 'none',
    requestStopped: false,
    decodeStopped: false,
    decodeClosed: false,
    dispatchAborted: false,
  };
  if (prefillAt === Number.POSITIVE_INFINITY && dispatchAt === Number.POSITIVE_INFINITY) return none;

  let trace: Trace;
  if (prefillAt < dispatchAt) {
    if (!s.prefill.ok) {
      // Rule 5: the call fails, the dispatch is abandoned, and released if it arrives.
      const released = dispatchAt !== Number.POSITIVE_INFINITY && s.dispatch.ok;
      return {
        ...none,
        call: 'prefill-error',
        requestStopped: true,
        dispatchAborted: true,
        decodeStopped: released,
        decodeClosed: released,
      };
    }
    // Rule 6: the decode stream itself, once it arrives.
    if (dispatchAt === Number.POSITIVE_INFINITY) return none;
    if (!s.dispatch.ok) return { ...none, call: 'dispatch-error' };
    trace = forward(s.decode, 0, []);
  } else {
    // Rules 7 and 8.
    if (!s.dispatch.ok) return { ...none, call: 'dispatch-error' };
    trace = guarded(s);
  }

  // The consumer's own stop (rule 14), right after its k-th item.
  const k = s.consumer.stopAfter;
  if (k !== null && k <= trace.outputs.length) {
    // Closing a decode iterator that has already reported its end is not needed (nor done).
    const sourceDone = trace.sourceDoneAfter !== null && trace.sourceDoneAfter < k;
    const stopped = trace.stopsAt !== null && trace.stopsAt < k;
    return {
      ...none,
      call: 'stream',
      outputs: trace.outputs.slice(0, k),
      end: 'consumer',
      requestStopped: stopped,
      decodeStopped: stopped,
      decodeClosed: !sourceDone,
    };
  }
  const stopped = trace.stopsAt !== null;
  return {
    ...none,
    call: 'stream',
    outputs: trace.outputs,
    end: trace.end,
    requestStopped: stopped,
    decodeStopped: stopped,
    decodeClosed: trace.closes,
  };
}
