// The streams the benchmark compares. Each case turns a decode source into the stream a
// client would read, and says what must stay alive while it is read (the prefill).
import {
  Annotated,
  Controller,
  disaggregate,
  LLMEngineOutput,
  PrefillTask,
  ResponseStream,
  sglangBootstrap,
} from 'disagg';
import { from, takeUntil } from 'rxjs';
import { HandWrittenGuard } from './hand-written-iterator.mjs';

const silent = { error() {}, warn() {}, info() {}, debug() {} };

/** N decode items, one token id each, then the end; a fresh item per step, as an engine makes. */
export async function* decodeSource(count) {
  for (let i = 0; i < count; i++) yield Annotated.fromData({ token_ids: [i] });
}

/** A prefill that stays pending until `settle` is called (and is kept reachable until then). */
function pendingPrefill() {
  let resolve;
  let reject;
  const promise = new Promise((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

async function* passThrough(source) {
  for await (const item of source) yield item;
}

/**
 * What a router author writes by hand: a race of the pending prefill promise against each
 * decode pull. Every race leaves a reaction on the prefill promise until it settles.
 */
async function* perItemRace(prefill, source) {
  const iterator = source[Symbol.asyncIterator]();
  try {
    for (;;) {
      const next = await Promise.race([prefill, iterator.next()]);
      if (next === undefined) return; // prefill succeeded: a real router would forward the rest
      if (next.done) return;
      yield next.value;
    }
  } finally {
    iterator.return?.();
  }
}

/** An rxjs pipeline cut short by a prefill failure, read back as an async iterable. */
function rxjsPipeline(prefill, source) {
  const failure = from(prefill.then(() => new Promise(() => {})).catch(() => true));
  return observableToAsyncIterable(from(source).pipe(takeUntil(failure)));
}

/** The usual hand-written adapter from an Observable to an async iterable (a push queue). */
function observableToAsyncIterable(observable) {
  return {
    [Symbol.asyncIterator]() {
      const buffer = [];
      let waiting;
      let done = false;
      let failure;
      const subscription = observable.subscribe({
        next(value) {
          if (waiting) {
            const resolve = waiting.resolve;
            waiting = undefined;
            resolve({ value, done: false });
          } else buffer.push(value);
        },
        error(error) {
          failure = error;
          done = true;
          if (waiting) waiting.reject(error);
        },
        complete() {
          done = true;
          if (waiting) waiting.resolve({ value: undefined, done: true });
        },
      });
      return {
        next() {
          if (buffer.length > 0) return Promise.resolve({ value: buffer.shift(), done: false });
          if (failure) return Promise.reject(failure);
          if (done) return Promise.resolve({ value: undefined, done: true });
          return new Promise((resolve, reject) => {
            waiting = { resolve, reject };
          });
        },
        return() {
          subscription.unsubscribe();
          done = true;
          return Promise.resolve({ value: undefined, done: true });
        },
      };
    },
  };
}

async function wrapped(prefill, count) {
  const task = PrefillTask.spawn(prefill.promise, { logger: silent });
  const context = new Controller('bench');
  const stream = await task.forwardDecode(Promise.resolve(new ResponseStream(decodeSource(count), context)), context);
  return { task, stream };
}

/** A prefill response that answers once `prefill` settles. */
async function* prefillStream(prefill) {
  await prefill.promise;
  yield Annotated.fromData(LLMEngineOutput.length());
}

/** The whole flow (concurrent family), prefill pending, optionally with every decode budget armed. */
async function flow(prefill, count, deadlines) {
  return disaggregate({
    request: { model: 'm', prompt: 'p', max_tokens: count, stream: true },
    context: new Controller('bench'),
    prefill: async (_, context) => new ResponseStream(prefillStream(prefill), context),
    decode: async (_, context) => new ResponseStream(decodeSource(count), context),
    connector: sglangBootstrap,
    prefillWorker: { bootstrapHost: '127.0.0.1', bootstrapPort: 8998 },
    ...(deadlines === undefined ? {} : { deadlines }),
    logger: silent,
  });
}

/**
 * Each case: `open(count)` resolves to `{ stream, keep }`; `keep` is what the router holds
 * while the stream is read (the prefill, still pending where the case says so).
 */
export const CASES = {
  baseline: {
    label: 'bare for-await over the source (baseline)',
    open: async (count) => ({ stream: decodeSource(count), keep: null }),
  },
  passThrough: {
    label: 'plain pass-through async generator',
    open: async (count) => ({ stream: passThrough(decodeSource(count)), keep: null }),
  },
  forwardPending: {
    label: 'forwardDecode, prefill pending (racing)',
    open: async (count) => {
      const prefill = pendingPrefill();
      const { task, stream } = await wrapped(prefill, count);
      return { stream, keep: { prefill, task } };
    },
  },
  forwardSucceeded: {
    label: 'forwardDecode, prefill succeeded (forward-only)',
    open: async (count) => {
      const prefill = pendingPrefill();
      const { task, stream } = await wrapped(prefill, count);
      prefill.resolve();
      await task.wait();
      return { stream, keep: { task } };
    },
  },
  handWritten: {
    label: 'minimal hand-written iterator (racing rules only), prefill pending',
    open: async (count) => {
      const prefill = pendingPrefill();
      const context = new Controller('bench');
      const source = decodeSource(count);
      return { stream: new HandWrittenGuard(prefill.promise, source, context, context), keep: { prefill } };
    },
  },
  perItemRace: {
    label: 'per-item Promise.race, prefill pending',
    open: async (count) => {
      const prefill = pendingPrefill();
      return { stream: perItemRace(prefill.promise, decodeSource(count)), keep: { prefill } };
    },
  },
  // disaggregate arms DEFAULT_DEADLINES unless told otherwise (0 turns a budget off): the
  // first row turns them all off, the second keeps them (what the proxy runs by default).
  flowPending: {
    label: 'disaggregate (whole flow, concurrent), prefill pending, no budgets',
    open: async (count) => {
      const prefill = pendingPrefill();
      const off = { prefillFirstOutputMs: 0, handoffMs: 0, decodeFirstTokenMs: 0, idleMs: 0 };
      return { stream: await flow(prefill, count, off), keep: { prefill } };
    },
  },
  flowDeadlines: {
    label: 'disaggregate, prefill pending, default budgets + a total armed',
    open: async (count) => {
      const prefill = pendingPrefill();
      return { stream: await flow(prefill, count, { totalMs: 3_600_000 }), keep: { prefill } };
    },
  },
  rxjs: {
    label: 'rxjs from/takeUntil, prefill pending',
    open: async (count) => {
      const prefill = pendingPrefill();
      return { stream: rxjsPipeline(prefill.promise, decodeSource(count)), keep: { prefill } };
    },
  },
};

/**
 * Many streams at once: `streams` requests of `tokens` items each, all started together, each
 * prefill settling at a random point of its own decode stream (the same points in every mode).
 * With `measureLive`, also the peak of the live heap (after a full GC) while they run.
 */
export const CONCURRENT_MODES = {
  plain: 'unwrapped (the baseline)',
  passThrough: 'plain pass-through async generator',
  wrapped: 'through forwardDecode',
  handWritten: 'minimal hand-written iterator',
};

export async function concurrent({ streams, tokens, mode, seed, measureLive = false }) {
  let state = seed >>> 0 || 1;
  const random = () => {
    // xorshift32: the same schedule in every run and for both modes
    state ^= state << 13;
    state ^= state >>> 17;
    state ^= state << 5;
    return (state >>> 0) / 4294967296;
  };
  let items = 0;
  let peak = 0;
  const total = streams * tokens;
  let nextSample = measureLive ? Math.floor(total / 8) : Number.POSITIVE_INFINITY;
  // Live heap, not garbage: a full GC at every eighth of the run, in a round that is not timed.
  const sample = () => {
    nextSample += Math.floor(total / 8);
    globalThis.gc();
    const used = process.memoryUsage().heapUsed;
    if (used > peak) peak = used;
  };
  async function one() {
    const prefill = pendingPrefill();
    // Settles while its own decode is still streaming (a settle after the held terminal would
    // wait on a source nobody pulls any more).
    const settleAt = Math.floor(random() * tokens);
    async function* source() {
      for (let i = 0; i < tokens; i++) {
        if (i === settleAt) prefill.resolve();
        yield Annotated.fromData(i === tokens - 1 ? { token_ids: [i], finish_reason: 'length' } : { token_ids: [i] });
      }
    }
    const context = new Controller();
    let stream = new ResponseStream(source(), context);
    if (mode === 'wrapped') {
      const task = PrefillTask.spawn(prefill.promise, { logger: silent });
      stream = await task.forwardDecode(Promise.resolve(stream), context);
    } else if (mode === 'passThrough') {
      stream = passThrough(stream);
    } else if (mode === 'handWritten') {
      stream = new HandWrittenGuard(prefill.promise, stream[Symbol.asyncIterator](), context, context);
    }
    for await (const _ of stream) {
      items += 1;
      if (items >= nextSample) sample();
    }
    await prefill.promise;
  }
  const started = performance.now();
  await Promise.all(Array.from({ length: streams }, one));
  const seconds = (performance.now() - started) / 1000;
  return { items, itemsPerSecond: items / seconds, peakHeap: peak };
}
