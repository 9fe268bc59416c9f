import type * as Zmq from 'zeromq';
import { libraryLogger } from '../runtime/library-logger.js';
import type { Logger } from '../runtime/logger.js';
import { branded, DisaggError } from '../util/disagg-error.js';
import { decodeKvEventBatch, type KvEventBatch } from './kv-events.js';

/** KV events were asked for, but the optional dependency `zeromq` is not installed. */
export class KvEventsUnavailableError extends DisaggError {
  static override readonly is = branded<KvEventsUnavailableError>('KvEventsUnavailableError');
  declare readonly code: 'DISAGG_KV_EVENTS_UNAVAILABLE';

  constructor(cause: unknown) {
    super('DISAGG_KV_EVENTS_UNAVAILABLE', 'KV cache events need the optional dependency zeromq: npm install zeromq@6', {
      cause,
    });
  }
}

/**
 * Where a subscriber stands: `live` (every batch applied in order), `recovering` (a gap is
 * being replayed: the view is not trusted), `closed`.
 */
export type KvSubscriberState = 'live' | 'recovering' | 'closed';

/** Options of {@link KvEventSubscriber}. */
export interface KvEventSubscriberOptions {
  /** The engine's publisher, as the router reaches it (`tcp://10.0.0.5:5557`). */
  endpoint: string;
  /** Its replay socket (`tcp://10.0.0.5:5558`); without one, lost events cannot be recovered. */
  replayEndpoint?: string | undefined;
  /** The topic prefix to take; every topic by default. */
  topic?: string | undefined;
  /** Each batch, in order, once. */
  onBatch(batch: KvEventBatch, seq: bigint): void;
  /**
   * The view must start again (the engine restarted: its sequence went back; or events were
   * lost and could not be replayed): forget what it held.
   */
  onReset(reason: 'restart' | 'lost'): void;
  /** Whether the view is complete (false while a gap is being replayed). */
  onTrust?(trusted: boolean): void;
  /** How its log lines name the worker (`worker`); they name the endpoint only by default. */
  name?: string | undefined;
  /**
   * What a failed replay's log line suggests to check; by default that the engine's
   * `replay_endpoint` is bound at the replay endpoint's port and reachable from here.
   */
  replayHint?: string | undefined;
  /** How long a replay may take before it is given up (the view then starts again). Default 5,000 ms. */
  replayTimeoutMs?: number | undefined;
  logger?: Logger | undefined;
}

/** What a subscriber has seen, for metrics. */
export interface KvSubscriberStats {
  batches: number;
  events: number;
  unknownEvents: number;
  malformed: number;
  gaps: number;
  replays: { recovered: number; failed: number };
  restarts: number;
  /** The last sequence number applied. */
  lastSeq: bigint | undefined;
  /** The last batch's age when it arrived, in ms (the engine's clock against ours). */
  lagMs: number | undefined;
}

const END = (1n << 64n) - 1n; // seq -1: the end of a replay

/**
 * Follows one engine's KV cache events (one data-parallel rank's publisher): a ZMQ SUB on its
 * endpoint, and a DEALER on its replay socket for what the live stream did not carry. Batches
 * go to `onBatch` in sequence order, once each. At start, and at any gap in the sequence (a
 * message lost, the ones published before the router joined), the missing batches are asked
 * of the replay socket (`["", start_seq]`; answers `[topic, seq, payload]` in vLLM >= 0.26,
 * `[seq, payload]` in older vLLM and SGLang, then seq -1) and the view is untrusted until they
 * are in. A sequence that goes back is a restarted engine: the view is reset. A gap that cannot
 * be replayed resets the view too: what was lost may have removed blocks.
 *
 * Needs the optional dependency `zeromq`. `close()` stops it; nothing is left running.
 *
 * `KvFollower` (`disagg/server`) runs one per worker of a pool into one index; use this one
 * for a feed of your own.
 *
 * @example
 * const subscriber = new KvEventSubscriber({
 *   endpoint: 'tcp://10.0.0.5:5557', replayEndpoint: 'tcp://10.0.0.5:5558',
 *   onBatch: (batch) => batch.events.forEach((event) => index.apply(worker, event)),
 *   onReset: () => index.clear(worker),
 *   // Not trusted while a gap is replayed: scorers read the worker's view as unknown meanwhile.
 *   onTrust: (trusted) => index.setTrusted(worker, trusted),
 * });
 * await subscriber.start();
 */
export class KvEventSubscriber {
  readonly #options: KvEventSubscriberOptions;
  readonly #logger: Logger;
  #state: KvSubscriberState = 'live';
  #zmq: typeof Zmq | undefined;
  #sub: Zmq.Subscriber | undefined;
  #dealer: Zmq.Dealer | undefined;
  #loop: Promise<void> | undefined;
  /** Live messages at or below this were also replayed: dropped as duplicates, once. */
  #replayedUpTo: bigint | undefined;
  readonly stats: KvSubscriberStats = {
    batches: 0,
    events: 0,
    unknownEvents: 0,
    malformed: 0,
    gaps: 0,
    replays: { recovered: 0, failed: 0 },
    restarts: 0,
    lastSeq: undefined,
    lagMs: undefined,
  };

  constructor(options: KvEventSubscriberOptions) {
    this.#options = options;
    const logger = libraryLogger(options.logger);
    // Every line says whose events these are: an operator reads worker names, not addresses.
    this.#logger = options.name === undefined ? logger : naming(logger, options.name);
  }

  /** Where it stands. */
  get state(): KvSubscriberState {
    return this.#state;
  }

  /**
   * Connects and starts following (ZMQ connects in the background: an engine that is not up
   * yet is reached when it is). Resolves once subscribed, and once the first replay is over.
   *
   * @throws {KvEventsUnavailableError} without the `zeromq` package.
   */
  async start(): Promise<void> {
    try {
      this.#zmq = await import('zeromq');
    } catch (error) {
      throw new KvEventsUnavailableError(error);
    }
    const sub = new this.#zmq.Subscriber();
    sub.connect(this.#options.endpoint);
    sub.subscribe(this.#options.topic ?? '');
    this.#sub = sub;
    // What was published before we joined, as far as the engine still buffers it.
    if (this.#options.replayEndpoint !== undefined) await this.#replay(0n, 'start');
    this.#loop = this.#follow(sub);
  }

  /** Stops following and closes its sockets. */
  async close(): Promise<void> {
    if (this.#state === 'closed') return;
    this.#state = 'closed';
    this.#sub?.close();
    this.#dealer?.close();
    await this.#loop?.catch(() => {});
  }

  async #follow(sub: Zmq.Subscriber): Promise<void> {
    try {
      for await (const frames of sub) {
        if (this.#state === 'closed') return;
        // [topic, seq, payload]; a publisher without a topic sends [seq, payload].
        const [seqFrame, payload] = frames.length >= 3 ? [frames[1], frames[2]] : [frames[0], frames[1]];
        await this.#receive(readSeq(seqFrame), payload);
      }
    } catch (error) {
      if (this.#state !== 'closed') {
        this.#logger.warn({ err: error, endpoint: this.#options.endpoint }, 'KV event subscription ended');
      }
    }
  }

  async #receive(seq: bigint | undefined, payload: Buffer | undefined): Promise<void> {
    if (seq === undefined || payload === undefined) {
      this.stats.malformed++;
      return;
    }
    const last = this.stats.lastSeq;
    if (last !== undefined && seq <= last) {
      if (this.#replayedUpTo !== undefined && seq <= this.#replayedUpTo) return; // also replayed
      // The sequence went back: the engine restarted, and its cache with it.
      this.stats.restarts++;
      this.#logger.info(
        { endpoint: this.#options.endpoint, seq: String(seq), last: String(last) },
        'KV event sequence went back: the engine restarted; its view starts again',
      );
      this.stats.lastSeq = undefined;
      this.#options.onReset('restart');
      if (seq > 0n && this.#options.replayEndpoint !== undefined) await this.#replay(0n, 'restart');
    } else if (last !== undefined && seq > last + 1n) {
      this.stats.gaps++;
      if (this.#options.replayEndpoint !== undefined) await this.#replay(last + 1n, 'gap');
      else this.#lost(last + 1n, seq);
    } else if (
      last === undefined &&
      seq > 0n &&
      this.#options.replayEndpoint !== undefined &&
      this.#replayedUpTo === undefined
    ) {
      await this.#replay(0n, 'start');
    }
    this.#replayedUpTo = undefined;
    const now = this.stats.lastSeq;
    if (now !== undefined && seq <= now) return; // the replay brought it already
    this.#apply(seq, payload);
  }

  #apply(seq: bigint, payload: Uint8Array): void {
    let batch: KvEventBatch;
    try {
      batch = decodeKvEventBatch(payload);
    } catch (error) {
      this.stats.malformed++;
      this.#logger.warn(
        { err: error, endpoint: this.#options.endpoint, seq: String(seq) },
        'Skipped a KV event batch that could not be read',
      );
      this.stats.lastSeq = seq;
      return;
    }
    this.stats.lastSeq = seq;
    this.stats.batches++;
    this.stats.events += batch.events.length;
    this.stats.unknownEvents += batch.unknown;
    if (batch.ts > 0) this.stats.lagMs = Math.max(0, Date.now() - batch.ts * 1000);
    this.#options.onBatch(batch, seq);
  }

  /** Events from `from` up to `to` are gone for good: the view starts again from here. */
  #lost(from: bigint, to: bigint | undefined): void {
    this.#logger.warn(
      { endpoint: this.#options.endpoint, from: String(from), ...(to === undefined ? {} : { to: String(to) }) },
      'KV events were lost and cannot be replayed: the view of this worker starts again',
    );
    this.#options.onReset('lost');
  }

  /** Asks the replay socket for every batch from `start`, and applies them in order. */
  async #replay(start: bigint, why: 'start' | 'gap' | 'restart'): Promise<void> {
    const zmq = this.#zmq as typeof Zmq;
    this.#state = 'recovering';
    this.#options.onTrust?.(false);
    const timeout = this.#options.replayTimeoutMs ?? 5000;
    try {
      this.#dealer ??= (() => {
        const dealer = new zmq.Dealer({ receiveTimeout: timeout, linger: 0 });
        dealer.connect(this.#options.replayEndpoint as string);
        return dealer;
      })();
      const dealer = this.#dealer;
      const request = Buffer.alloc(8);
      request.writeBigUInt64BE(start);
      await dealer.send([Buffer.alloc(0), request]);
      let applied = 0;
      for (;;) {
        const frames = await dealer.receive();
        // ["", topic, seq, payload] (vLLM >= 0.26) or ["", seq, payload]; the delimiter may be absent.
        const body = frames[0]?.length === 0 ? frames.slice(1) : frames;
        const [seqFrame, payload] = body.length >= 3 ? [body[1], body[2]] : [body[0], body[1]];
        const seq = readSeq(seqFrame);
        if (seq === undefined || seq === END) break;
        const last = this.stats.lastSeq;
        if (last !== undefined && seq <= last) continue;
        if (payload !== undefined && payload.length > 0) {
          this.#apply(seq, payload);
          applied++;
        }
      }
      this.#replayedUpTo = this.stats.lastSeq;
      this.stats.replays.recovered++;
      this.#logger.debug(
        { endpoint: this.#options.replayEndpoint, why, start: String(start), applied },
        'Replayed KV events',
      );
    } catch (error) {
      if ((this.#state as KvSubscriberState) === 'closed') return;
      this.stats.replays.failed++;
      // A replay that timed out leaves its socket waiting for an answer: start a new one next time.
      this.#dealer?.close();
      this.#dealer = undefined;
      const replayEndpoint = this.#options.replayEndpoint as string;
      this.#logger.warn(
        { err: error, endpoint: replayEndpoint, why, hint: this.#options.replayHint ?? replayHint(replayEndpoint) },
        'KV event replay failed: events missed before the router joined, or lost on the way, are not recovered',
      );
      if (why !== 'start') this.#lost(start, undefined);
    } finally {
      if ((this.#state as KvSubscriberState) !== 'closed') {
        this.#state = 'live';
        this.#options.onTrust?.(true);
      }
    }
  }
}

/** `logger`, each line with the worker's name. */
function naming(logger: Logger, worker: string): Logger {
  const at =
    (level: keyof Logger) =>
    (fields: object, message?: string): void =>
      logger[level]({ worker, ...fields }, message);
  return { error: at('error'), warn: at('warn'), info: at('info'), debug: at('debug') };
}

/** The default hint of a failed replay: what to check on the engine's side. */
function replayHint(endpoint: string): string {
  const port = /:(\d+)$/.exec(endpoint)?.[1] ?? '?';
  return `is the engine started with a replay_endpoint in its --kv-events-config on port ${port} (such as "tcp://*:${port}"), and is that port open from the router to the worker?`;
}

function readSeq(frame: Buffer | undefined): bigint | undefined {
  if (frame === undefined || frame.length !== 8) return undefined;
  return frame.readBigUInt64BE(0);
}
