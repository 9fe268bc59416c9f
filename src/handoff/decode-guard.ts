import { Annotated } from '../protocol/annotated.js';
import { FinishReason } from '../protocol/finish-reason.js';
import type { LLMEngineOutput } from '../protocol/llm-engine-output.js';
import type { AsyncEngineContext } from '../runtime/controller.js';
import { FAILED, PENDING, type PrefillOutcome, type PrefillState } from './prefill-outcome.js';

type Item = Annotated<LLMEngineOutput>;

/** How an item read while prefill is pending is treated (rules 11-13). */
const FLOWING = 0;
const FAILURE = 1;
const TERMINAL = 2;

function classify(item: Item): typeof FLOWING | typeof FAILURE | typeof TERMINAL {
  if (Annotated.isError(item)) return FAILURE;
  const reason = item?.data?.finish_reason;
  if (reason === undefined || reason === null) return FLOWING;
  return FinishReason.isFailure(reason) ? FAILURE : TERMINAL;
}

/** A rejection of the decode iterator's `next()`, carried through a turn as a value. */
class Thrown {
  constructor(readonly error: unknown) {}
}

/**
 * Calls `return()` on an iterator without waiting for it. An async generator's `return()`
 * queues behind a `next()` that is still in flight, so awaiting it on a stuck source would
 * hang the caller; its outcome is of no use to us, but a rejection must still be handled.
 */
export function closeQuietly(iterator: AsyncIterator<unknown>): void {
  try {
    const closing = iterator.return?.();
    if (closing !== undefined && typeof closing.then === 'function') closing.then(undefined, ignore);
  } catch {
    // A source whose return() throws is closed as far as we can close it.
  }
}

function ignore(): void {}

/**
 * Phase B of `forwardDecode`: the decode stream, guarded by the prefill outcome.
 *
 * An async generator does the work; the object returned is that generator with `return()`
 * and `throw()` extended to close the decode iterator even when the generator has not
 * started or is waiting on prefill, so a consumer can always close the stream.
 *
 * @internal
 */
export function guardDecode(
  outcome: PrefillOutcome,
  source: AsyncIterator<Item>,
  requestContext: AsyncEngineContext,
  streamContext: AsyncEngineContext,
): AsyncGenerator<Item, void, undefined> {
  // The one pending "turn": a promise the generator awaits while prefill is pending. It is
  // settled by whichever comes first: the in-flight decode pull, the prefill outcome (via the
  // listener registered once below), or the consumer closing the stream.
  let resolveTurn: ((value: unknown) => void) | undefined;
  let sourceOpen = true;
  let closing = false;

  const startTurn = (resolve: (value: unknown) => void): void => {
    resolveTurn = resolve;
  };
  const endTurn = (value: unknown): void => {
    const resolve = resolveTurn;
    if (resolve !== undefined) {
      resolveTurn = undefined;
      resolve(value);
    }
  };
  const onPullRejected = (error: unknown): void => endTurn(new Thrown(error));
  const onPrefillSettled = (): void => endTurn(undefined);
  const closeSource = (): void => {
    if (sourceOpen) {
      sourceOpen = false;
      closeQuietly(source);
    }
  };

  async function* run(): AsyncGenerator<Item, void, undefined> {
    outcome.listen(onPrefillSettled);
    // A pull started while prefill was pending and left unread when prefill won the race.
    let inFlight: Promise<IteratorResult<Item>> | undefined;
    try {
      // Racing mode. Every check of `outcome.state` comes before the decode result is used:
      // a prefill outcome that is already known wins over a decode item that is also ready.
      while (outcome.state === PENDING) {
        const pull = Promise.resolve(source.next());
        pull.then(endTurn, onPullRejected);
        const settled = await new Promise(startTurn);
        if (closing) return;
        if (outcome.state !== PENDING) {
          inFlight = pull;
          break;
        }
        if (settled instanceof Thrown) {
          sourceOpen = false;
          throw settled.error;
        }
        const result = settled as IteratorResult<Item>;
        const item = result.value as Item;
        const kind = result.done === true ? TERMINAL : classify(item);
        if (kind === FLOWING) {
          yield item;
          continue;
        }
        if (kind === FAILURE) {
          // Rule 11: a decode failure is the answer; prefill is not awaited, nothing stopped.
          closeSource();
          yield item;
          return;
        }
        // Rule 12: hold the terminal (an item with a finish reason, or the end) for prefill.
        if (result.done === true) sourceOpen = false;
        if (outcome.state === PENDING) {
          await new Promise(startTurn);
          if (closing) return;
        }
        // The await above may have changed the state; TypeScript cannot know.
        if ((outcome.state as PrefillState) === FAILED) break;
        closeSource();
        if (result.done !== true) yield item;
        return;
      }

      if (outcome.state === FAILED) {
        // Rules 9 and 12: one error item replaces whatever decode would have said.
        closeSource();
        requestContext.stopGenerating();
        streamContext.stopGenerating();
        yield Annotated.fromError<LLMEngineOutput>(outcome.error as Error);
        return;
      }

      // Rule 10: prefill succeeded; forward the rest unchanged, starting with the pull that
      // was in flight when it did, so that no item is lost or reordered.
      outcome.unlisten(onPrefillSettled);
      let next = inFlight ?? source.next();
      for (;;) {
        let result: IteratorResult<Item>;
        try {
          result = await next;
        } catch (error) {
          sourceOpen = false;
          throw error;
        }
        if (result.done === true) {
          sourceOpen = false;
          return;
        }
        yield result.value;
        next = source.next();
      }
    } finally {
      outcome.unlisten(onPrefillSettled);
      resolveTurn = undefined;
      // Rule 14 and early exits: close decode, never touch prefill.
      closeSource();
    }
  }

  const generator = run();
  const generatorReturn = generator.return.bind(generator);
  const generatorThrow = generator.throw.bind(generator);
  // A generator that is suspended on an await (not a yield) queues return() until it yields
  // again, and one that never started skips its finally block. Both would leave the decode
  // iterator open, or a consumer waiting on a prefill that may never settle; so closing
  // closes the source at once and wakes the pending turn, then lets the generator finish.
  const close = (): void => {
    closing = true;
    closeSource();
    endTurn(undefined);
  };
  generator.return = (value) => {
    close();
    return generatorReturn(value);
  };
  generator.throw = (error) => {
    close();
    return generatorThrow(error);
  };
  return generator;
}
