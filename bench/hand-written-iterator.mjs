// The benchmark's extra row: the racing logic of forwardDecode's phase B and nothing else, as
// the least a plain AsyncIterator class can do. It is the floor for the guard (itself a
// hand-written iterator since 2026-12-03), which also keeps what this row leaves out: a queue
// for concurrent next() calls (for-await never makes them, so the benchmark does not either),
// the microtask after each read that lets a prefill settling in the same turn win, the flow's
// hooks and the library's checks.
//
// It answers each next() with the one promise it creates per item and hands the decode
// iterator's own IteratorResult through.
import { Annotated } from 'disagg';

const PENDING = 0;
const SUCCEEDED = 1;
const FAILED = 2;
const DONE = Object.freeze({ value: undefined, done: true });

export class HandWrittenGuard {
  #state = PENDING;
  #error;
  #source;
  #contexts;
  #finished = false;
  #resolve;
  #reject;
  #held;
  #pull;

  constructor(prefill, source, requestContext, streamContext) {
    this.#source = source;
    this.#contexts = [requestContext, streamContext];
    prefill.then(
      () => this.#settle(SUCCEEDED),
      (error) => {
        this.#error = error;
        this.#settle(FAILED);
      },
    );
  }

  [Symbol.asyncIterator]() {
    return this;
  }

  #executor = (resolve, reject) => {
    this.#resolve = resolve;
    this.#reject = reject;
    this.#pull.then(this.#onStep, this.#onThrow);
  };

  #onStep = (step) => {
    const resolve = this.#resolve;
    if (resolve === undefined) return; // prefill answered this turn already
    if (this.#state !== PENDING) return this.#answerPrefill(step);
    if (step.done) return this.#hold(step);
    const item = step.value;
    const reason = item?.data?.finish_reason;
    if (Annotated.isError(item) || reason === 'cancelled' || (typeof reason === 'object' && reason !== null)) {
      this.#finish();
      return this.#answer(step);
    }
    if (reason !== undefined && reason !== null) return this.#hold(step);
    this.#answer(step);
  };

  #onThrow = (error) => {
    const reject = this.#reject;
    if (reject === undefined) return;
    this.#resolve = this.#reject = undefined;
    this.#finished = true;
    reject(error);
  };

  #answer(step) {
    const resolve = this.#resolve;
    this.#resolve = this.#reject = undefined;
    resolve(step);
  }

  #hold(step) {
    this.#held = step;
    if (this.#state !== PENDING) this.#answerPrefill(step);
  }

  #answerPrefill(step) {
    if (this.#state === FAILED) {
      this.#finish();
      for (const context of this.#contexts) context.stopGenerating();
      return this.#answer({ value: Annotated.fromError(this.#error), done: false });
    }
    if (step === undefined) return; // woken while a pull is in flight: that pull answers
    if (step === this.#held) {
      // A released terminal ends the stream.
      this.#held = undefined;
      if (step.done) this.#finished = true;
      else this.#finish();
    }
    this.#answer(step);
  }

  #settle(state) {
    this.#state = state;
    if (this.#resolve === undefined) return;
    if (state === FAILED || this.#held !== undefined) this.#answerPrefill(this.#held);
  }

  #finish() {
    if (this.#finished) return;
    this.#finished = true;
    const closing = this.#source.return?.();
    closing?.then(undefined, () => {});
  }

  next() {
    if (this.#finished) return Promise.resolve(DONE);
    if (this.#state === SUCCEEDED) return this.#source.next();
    if (this.#state === FAILED) {
      this.#finish();
      for (const context of this.#contexts) context.stopGenerating();
      this.#finished = true;
      return Promise.resolve({ value: Annotated.fromError(this.#error), done: false });
    }
    this.#pull = this.#source.next();
    return new Promise(this.#executor);
  }

  return() {
    this.#finish();
    if (this.#resolve !== undefined) this.#answer(DONE);
    return Promise.resolve(DONE);
  }
}
