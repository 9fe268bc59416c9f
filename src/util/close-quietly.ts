/**
 * Calls `return()` on an iterator without waiting for it. An async generator's `return()`
 * queues behind a `next()` that is still in flight, so awaiting it on a stuck source would
 * hang the caller; its outcome is of no use to us, but a rejection must still be handled.
 * An iterator without `return()` has nothing to close; one whose `return()` throws is closed
 * as far as it can be.
 */
export function closeQuietly(iterator: AsyncIterator<unknown>): void {
  try {
    Promise.resolve(iterator.return?.()).then(undefined, ignore);
  } catch {
    // A source whose return() throws is closed as far as we can close it.
  }
}

/**
 * Does nothing: the handler for a rejection whose reason is of no use (it is reported, or
 * answered, elsewhere) and that must not become an unhandled rejection.
 */
export function ignore(): void {}
