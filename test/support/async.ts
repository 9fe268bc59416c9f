import { Annotated } from '../../src/protocol/annotated.js';
import { LLMEngineOutput } from '../../src/protocol/llm-engine-output.js';
import type { AsyncEngineContext } from '../../src/runtime/controller.js';
import { Controller } from '../../src/runtime/controller.js';
import { ResponseStream } from '../../src/runtime/response-stream.js';

export type Item = Annotated<LLMEngineOutput>;

export interface Deferred<T> {
  promise: Promise<T>;
  resolve(value: T): void;
  reject(reason: unknown): void;
}

/** A promise with its resolvers (Node 20 has no Promise.withResolvers). */
export function deferred<T = void>(): Deferred<T> {
  let resolve!: (value: T) => void;
  let reject!: (reason: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

/** Lets every pending microtask and one macrotask turn run: a deterministic "settle now". */
export function flush(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

const PENDING = Symbol('pending');

/** Whether `promise` is still pending after everything that can settle now has settled. */
export async function isPending(promise: Promise<unknown>): Promise<boolean> {
  promise.then(
    () => {},
    () => {},
  );
  const marker = new Promise((resolve) => setImmediate(() => resolve(PENDING)));
  return (await Promise.race([promise, marker])) === PENDING;
}

export const token = (id: number): Item => Annotated.fromData({ token_ids: [id] });
export const lengthItem = (): Item => Annotated.fromData(LLMEngineOutput.length());

/**
 * A decode source the test drives by hand: items are pushed, `next()` waits for them, and
 * every call of `next()` and `return()` is counted. Like an async generator, once it has
 * answered `done` or thrown, it answers `done` from then on.
 */
export class ScriptedSource implements AsyncIterableIterator<Item> {
  nextCalls = 0;
  returnCalls = 0;
  /** Every promise `next()` has returned, in order (to check what a wrapper hands through). */
  readonly answers: Promise<IteratorResult<Item>>[] = [];
  readonly #queue: Array<IteratorResult<Item> | { error: unknown }> = [];
  readonly #waiting: Deferred<IteratorResult<Item>>[] = [];
  #finished = false;

  constructor(items: Item[] = []) {
    for (const item of items) this.push(item);
  }

  push(item: Item): this {
    this.#deliver({ value: item, done: false });
    return this;
  }

  end(): this {
    this.#deliver({ value: undefined, done: true });
    return this;
  }

  fail(error: unknown): this {
    this.#deliver({ error });
    return this;
  }

  get closed(): boolean {
    return this.returnCalls > 0;
  }

  /** Whether it has answered `done` (to a `next()`, or because it was closed). */
  get finished(): boolean {
    return this.#finished;
  }

  next(): Promise<IteratorResult<Item>> {
    const answer = this.#answer();
    this.answers.push(answer);
    return answer;
  }

  #answer(): Promise<IteratorResult<Item>> {
    this.nextCalls += 1;
    if (this.#finished) return Promise.resolve({ value: undefined, done: true });
    const queued = this.#queue.shift();
    if (queued !== undefined) {
      if ('error' in queued || queued.done === true) this.#finished = true;
      return this.#settle(queued);
    }
    const waiter = deferred<IteratorResult<Item>>();
    this.#waiting.push(waiter);
    return waiter.promise;
  }

  return(): Promise<IteratorResult<Item>> {
    this.returnCalls += 1;
    this.#finished = true;
    for (const waiter of this.#waiting.splice(0)) waiter.resolve({ value: undefined, done: true });
    return Promise.resolve({ value: undefined, done: true });
  }

  [Symbol.asyncIterator](): this {
    return this;
  }

  #deliver(entry: IteratorResult<Item> | { error: unknown }): void {
    const waiter = this.#waiting.shift();
    if (waiter === undefined) {
      this.#queue.push(entry);
    } else if ('error' in entry) {
      this.#finished = true;
      waiter.reject(entry.error);
      for (const queued of this.#waiting.splice(0)) queued.resolve({ value: undefined, done: true });
    } else if (entry.done === true) {
      this.#finished = true;
      waiter.resolve(entry);
      for (const queued of this.#waiting.splice(0)) queued.resolve(entry);
    } else {
      waiter.resolve(entry);
    }
  }

  #settle(entry: IteratorResult<Item> | { error: unknown }): Promise<IteratorResult<Item>> {
    return 'error' in entry ? Promise.reject(entry.error) : Promise.resolve(entry);
  }
}

/** A decode response over a scripted source, with its own context. */
export function decodeStream(source: ScriptedSource, context: AsyncEngineContext = new Controller('decode')) {
  return new ResponseStream<Item>(source, context);
}

/** Reads the whole stream into an array. */
export async function collect<T>(stream: AsyncIterable<T>): Promise<T[]> {
  const items: T[] = [];
  for await (const item of stream) items.push(item);
  return items;
}

/** A logger that records what it is given. */
export function recordingLogger() {
  const records: Array<{ level: string; fields: object; message: string | undefined }> = [];
  const at =
    (level: string) =>
    (fields: object, message?: string): void => {
      records.push({ level, fields, message });
    };
  return { records, logger: { error: at('error'), warn: at('warn'), info: at('info'), debug: at('debug') } };
}
