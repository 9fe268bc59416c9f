// An in-memory stand-in for the `zeromq` package, for unit tests of what follows engines' KV
// events: `vi.mock('zeromq')` picks it up through __mocks__/zeromq.ts. The native sockets crash
// in the worker threads Stryker runs vitest in, and real ones connect and deliver in the
// background, which a unit test can only wait for with timeouts. Here an engine is bound at
// its endpoints first, and what it publishes reaches the subscribers connected to it within
// the current turn (await `flush()` from ./async.js), so tests stay deterministic.
import type { FakeKvEvent } from '../../src/fakes/fake-kv-publisher.js';
import { msgpack } from '../../src/util/msgpack.js';

const bound = new Map<string, FakeKvEngine>();
const END = Buffer.alloc(8, 0xff);

function seqFrame(seq: bigint): Buffer {
  const frame = Buffer.alloc(8);
  frame.writeBigUInt64BE(seq);
  return frame;
}

/** How an engine answers replay requests: at once, not until `releaseReplays()`, or never (a timeout). */
export type ReplayMode = 'answer' | 'hold' | 'fail';

/**
 * One engine's KV event publisher (its PUB endpoint and, optionally, its replay endpoint), as
 * vLLM frames them: `[topic, seq, msgpack [ts, events, rank]]` live, and for a replay request
 * every buffered batch from the asked seq then the end marker (seq -1).
 */
export class FakeKvEngine {
  readonly endpoint: string;
  readonly replayEndpoint: string | undefined;
  /** Every subscriber that connected to `endpoint`, closed ones included. */
  readonly subscribers: Subscriber[] = [];
  /** The start seq of each replay asked of it, in order. */
  readonly replayRequests: bigint[] = [];
  replays: ReplayMode = 'answer';
  readonly #topic: string;
  readonly #buffer: Array<{ seq: bigint; payload: Buffer }> = [];
  readonly #held: Array<() => void> = [];
  #seq = 0n;
  #lose = false;

  private constructor(endpoint: string, replayEndpoint: string | undefined, topic: string) {
    this.endpoint = endpoint;
    this.replayEndpoint = replayEndpoint;
    this.#topic = topic;
  }

  /** An engine reached at `endpoint` (and `replayEndpoint`), publishing under `topic`. */
  static bind(endpoint: string, replayEndpoint?: string, topic = ''): FakeKvEngine {
    const engine = new FakeKvEngine(endpoint, replayEndpoint, topic);
    bound.set(endpoint, engine);
    if (replayEndpoint !== undefined) bound.set(replayEndpoint, engine);
    return engine;
  }

  /** Unbinds every engine (between tests). */
  static unbindAll(): void {
    bound.clear();
  }

  /** The subscribers connected now (not closed). */
  get open(): Subscriber[] {
    return this.subscribers.filter((subscriber) => !subscriber.closed);
  }

  /** Publishes one batch (one engine step) stamped `ts` (seconds; 0 for none); returns its seq. */
  publish(events: readonly FakeKvEvent[], ts = 0): bigint {
    const seq = this.#seq++;
    const payload = Buffer.from(msgpack().encoder.encode([ts, events, 0]));
    this.#buffer.push({ seq, payload });
    if (this.#lose) {
      this.#lose = false;
      return seq;
    }
    this.send([Buffer.from(this.#topic), seqFrame(seq), payload]);
    return seq;
  }

  /** Sends these frames live as they are (a malformed message, say). */
  send(frames: Buffer[]): void {
    for (const subscriber of this.subscribers) subscriber.deliver(frames);
  }

  /** The next batch is not sent live (lost on the way); replays still have it. */
  loseNext(): void {
    this.#lose = true;
  }

  /** A restarted engine: its sequence starts at 0 again, its buffer empty. */
  restart(): void {
    this.#seq = 0n;
    this.#buffer.length = 0;
  }

  /** Answers the replays held so far (mode `hold`). */
  releaseReplays(): void {
    for (const answer of this.#held.splice(0)) answer();
  }

  /** @internal A dealer's request of a replay from `start`. */
  serve(dealer: Dealer, start: bigint): void {
    this.replayRequests.push(start);
    const answer = () => {
      for (const { seq, payload } of this.#buffer) {
        if (seq >= start) dealer.deliver([Buffer.alloc(0), Buffer.from(this.#topic), seqFrame(seq), payload]);
      }
      dealer.deliver([Buffer.alloc(0), Buffer.from(this.#topic), END, Buffer.alloc(0)]);
    };
    if (this.replays === 'answer') answer();
    else if (this.replays === 'hold') this.#held.push(answer);
    else dealer.fail(new Error('Socket temporarily unavailable'));
  }
}

/** zeromq's SUB socket, as far as KvEventSubscriber uses it. */
export class Subscriber implements AsyncIterable<Buffer[]> {
  endpoint: string | undefined;
  readonly topics: string[] = [];
  closed = false;
  readonly #inbox: Buffer[][] = [];
  #waiting: ((result: IteratorResult<Buffer[]>) => void) | undefined;

  connect(endpoint: string): void {
    this.endpoint = endpoint;
    const engine = bound.get(endpoint);
    if (engine?.endpoint === endpoint) engine.subscribers.push(this);
  }

  subscribe(topic = ''): void {
    this.topics.push(topic);
  }

  close(): void {
    this.closed = true;
    this.#waiting?.({ done: true, value: undefined });
    this.#waiting = undefined;
  }

  /** @internal A message from the engine: kept if its first frame starts with a subscribed topic. */
  deliver(frames: Buffer[]): void {
    const topic = frames[0]?.toString() ?? '';
    if (this.closed || !this.topics.some((prefix) => topic.startsWith(prefix))) return;
    if (this.#waiting === undefined) this.#inbox.push(frames);
    else {
      this.#waiting({ done: false, value: frames });
      this.#waiting = undefined;
    }
  }

  [Symbol.asyncIterator](): AsyncIterator<Buffer[]> {
    return {
      next: () => {
        if (this.closed) return Promise.resolve({ done: true, value: undefined });
        const frames = this.#inbox.shift();
        if (frames !== undefined) return Promise.resolve({ done: false, value: frames });
        return new Promise((resolve) => {
          this.#waiting = resolve;
        });
      },
    };
  }
}

/** zeromq's DEALER socket, as far as KvEventSubscriber uses it for replays. */
export class Dealer {
  endpoint: string | undefined;
  closed = false;
  readonly #inbox: Array<Buffer[] | Error> = [];
  #waiting: { resolve(frames: Buffer[]): void; reject(error: Error): void } | undefined;

  constructor(readonly options: { receiveTimeout?: number; linger?: number } = {}) {}

  connect(endpoint: string): void {
    this.endpoint = endpoint;
  }

  async send(frames: Buffer[]): Promise<void> {
    const engine = this.endpoint === undefined ? undefined : bound.get(this.endpoint);
    const start = frames[1];
    // Nothing bound there never answers: the receive times out (here without the wait).
    if (engine === undefined || engine.replayEndpoint !== this.endpoint || start === undefined) {
      this.fail(new Error('Operation timed out'));
    } else engine.serve(this, start.readBigUInt64BE(0));
  }

  receive(): Promise<Buffer[]> {
    if (this.closed) return Promise.reject(new Error('Socket is closed'));
    const next = this.#inbox.shift();
    if (next instanceof Error) return Promise.reject(next);
    if (next !== undefined) return Promise.resolve(next);
    return new Promise((resolve, reject) => {
      this.#waiting = { resolve, reject };
    });
  }

  close(): void {
    this.closed = true;
    this.#waiting?.reject(new Error('Socket is closed'));
    this.#waiting = undefined;
  }

  /** @internal An answer of the engine. */
  deliver(frames: Buffer[]): void {
    this.#push(frames);
  }

  /** @internal The pending (or next) receive fails with `error`. */
  fail(error: Error): void {
    this.#push(error);
  }

  #push(item: Buffer[] | Error): void {
    if (this.closed) return;
    const waiting = this.#waiting;
    if (waiting === undefined) {
      this.#inbox.push(item);
      return;
    }
    this.#waiting = undefined;
    if (item instanceof Error) waiting.reject(item);
    else waiting.resolve(item);
  }
}
