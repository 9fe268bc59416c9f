import type * as Zmq from 'zeromq';
import { msgpack } from '../util/msgpack.js';

/** An event as a fake publisher sends it: the engines' field names. */
export type FakeKvEvent =
  | {
      type: 'BlockStored';
      block_hashes: Array<bigint | number | Uint8Array>;
      parent_block_hash: bigint | number | Uint8Array | null;
      token_ids: number[];
      block_size: number;
      lora_name?: string | null | undefined;
      medium?: string | null | undefined;
    }
  | { type: 'BlockRemoved'; block_hashes: Array<bigint | number | Uint8Array>; medium?: string | null | undefined }
  | { type: 'AllBlocksCleared' };

/** Options of {@link FakeKvPublisher.start}. */
export interface FakeKvPublisherOptions {
  /**
   * How events are encoded: `map` (tagged maps, vLLM PR #42892 onward) or `array` (tagged
   * arrays, older vLLM and SGLang). Default `map`.
   */
  encoding?: 'map' | 'array' | undefined;
  /** How replays answer: `topic` (`[topic, seq, payload]`, vLLM >= 0.26) or `legacy` (`[seq, payload]`). Default `topic`. */
  replayForm?: 'topic' | 'legacy' | undefined;
  /** The topic of every message. Default `''`. */
  topic?: string | undefined;
  /** The data-parallel rank each batch names. Default 0. */
  dpRank?: number | undefined;
  /** How many batches the replay socket keeps. Default 10,000 (vLLM's `buffer_steps`). */
  bufferSteps?: number | undefined;
  /** The address both sockets are bound on. Default `127.0.0.1`. */
  host?: string | undefined;
  /** The PUB socket's port (vLLM's `endpoint`); 0, the default: any free port. */
  port?: number | undefined;
  /** The replay socket's port (vLLM's `replay_endpoint`); 0, the default: any free port. */
  replayPort?: number | undefined;
}

/**
 * An engine's KV event publisher as vLLM's `ZmqEventPublisher` runs it: a PUB socket sending
 * `[topic, seq (8 bytes big-endian), msgpack batch]` and a ROUTER socket answering replay
 * requests (`[identity, "", start_seq]`) with every buffered batch from there and an end
 * marker (seq -1). Both bound on ports of their own (loopback and any free ports by default). For tests of routers that
 * follow KV events; `restart()` starts the sequence again, as a restarted engine does.
 *
 * @example
 * const publisher = await FakeKvPublisher.start();
 * publisher.publish([{ type: 'BlockStored', block_hashes: [1n], parent_block_hash: null, token_ids: ids, block_size: 16 }]);
 */
export class FakeKvPublisher {
  readonly endpoint: string;
  readonly replayEndpoint: string;
  readonly #pub: Zmq.XPublisher;
  readonly #router: Zmq.Router;
  readonly #options: Required<Omit<FakeKvPublisherOptions, 'host' | 'port' | 'replayPort'>>;
  readonly #buffer: Array<{ seq: bigint; payload: Uint8Array }> = [];
  #seq = 0n;
  #closed = false;
  /** Sequence numbers `publish` skips on the live socket (still buffered for replay): a lost message. */
  readonly #drop = new Set<bigint>();

  #subscribers = 0;
  readonly #joined: Array<() => void> = [];

  private constructor(
    pub: Zmq.XPublisher,
    router: Zmq.Router,
    options: Required<Omit<FakeKvPublisherOptions, 'host' | 'port' | 'replayPort'>>,
  ) {
    this.#pub = pub;
    this.#router = router;
    this.#options = options;
    this.endpoint = pub.lastEndpoint as string;
    this.replayEndpoint = router.lastEndpoint as string;
    void this.#serveReplays();
    void this.#watchSubscriptions();
  }

  /**
   * Binds both sockets.
   *
   * @throws the `zeromq` error (`EADDRINUSE`) when a port given is taken.
   */
  static async start(options: FakeKvPublisherOptions = {}): Promise<FakeKvPublisher> {
    const zmq = await import('zeromq');
    // An XPUB sends what a PUB sends, and also hears subscriptions: tests can wait for one.
    const pub = new zmq.XPublisher({ linger: 0 });
    const router = new zmq.Router({ linger: 0 });
    const host = options.host ?? '127.0.0.1';
    const at = (port: number | undefined) => `tcp://${host.includes(':') ? `[${host}]` : host}:${port ? port : '*'}`;
    try {
      await pub.bind(at(options.port));
      await router.bind(at(options.replayPort));
    } catch (error) {
      pub.close();
      router.close();
      throw error;
    }
    return new FakeKvPublisher(pub, router, {
      encoding: options.encoding ?? 'map',
      replayForm: options.replayForm ?? 'topic',
      topic: options.topic ?? '',
      dpRank: options.dpRank ?? 0,
      bufferSteps: options.bufferSteps ?? 10_000,
    });
  }

  /**
   * Resolves once `count` subscriptions have reached the publisher: live messages sent before
   * are lost to that subscriber (ZMQ's slow joiner), as they are with a real engine.
   */
  subscribed(count = 1): Promise<void> {
    if (this.#subscribers >= count) return Promise.resolve();
    return new Promise((resolve) => {
      const check = () => {
        if (this.#subscribers >= count) resolve();
        else this.#joined.push(check);
      };
      this.#joined.push(check);
    });
  }

  /** The next sequence number. */
  get seq(): bigint {
    return this.#seq;
  }

  /** Publishes one batch (one engine step); resolves once it is sent. Its seq is returned. */
  async publish(events: readonly FakeKvEvent[]): Promise<bigint> {
    const seq = this.#seq++;
    const payload = msgpack().encoder.encode([
      Date.now() / 1000,
      events.map((event) => this.#encode(event)),
      this.#options.dpRank,
    ]);
    this.#buffer.push({ seq, payload });
    if (this.#buffer.length > this.#options.bufferSteps) this.#buffer.shift();
    if (this.#drop.delete(seq)) return seq;
    await this.#pub.send([this.#options.topic, seqFrame(seq), payload]);
    return seq;
  }

  /** The batch published next is not sent live (a message lost on the way); replay still has it. */
  loseNext(): void {
    this.#drop.add(this.#seq);
  }

  /** A restarted engine: its sequence starts at 0 again and its buffer is empty. */
  restart(): void {
    this.#seq = 0n;
    this.#buffer.length = 0;
  }

  /** Closes both sockets. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#pub.close();
    this.#router.close();
  }

  #encode(event: FakeKvEvent): unknown {
    if (this.#options.encoding === 'map') return event;
    switch (event.type) {
      case 'BlockStored':
        return [
          'BlockStored',
          event.block_hashes,
          event.parent_block_hash,
          event.token_ids,
          event.block_size,
          null,
          event.medium ?? 'GPU',
          event.lora_name ?? null,
        ];
      case 'BlockRemoved':
        return ['BlockRemoved', event.block_hashes, event.medium ?? 'GPU'];
      case 'AllBlocksCleared':
        return ['AllBlocksCleared'];
    }
  }

  async #watchSubscriptions(): Promise<void> {
    try {
      for await (const [frame] of this.#pub) {
        if (frame?.[0] !== 1) continue; // 1: subscribe, 0: unsubscribe
        this.#subscribers++;
        for (const wake of this.#joined.splice(0)) wake();
      }
    } catch {
      // Closed.
    }
  }

  async #serveReplays(): Promise<void> {
    try {
      for await (const [identity, , start] of this.#router) {
        if (identity === undefined || start === undefined || start.length !== 8) continue;
        const from = start.readBigUInt64BE(0);
        for (const { seq, payload } of this.#buffer) {
          if (seq < from) continue;
          const head = this.#options.replayForm === 'topic' ? [Buffer.from(this.#options.topic)] : [];
          await this.#router.send([identity, Buffer.alloc(0), ...head, seqFrame(seq), payload]);
        }
        const head = this.#options.replayForm === 'topic' ? [Buffer.from(this.#options.topic)] : [];
        await this.#router.send([identity, Buffer.alloc(0), ...head, Buffer.alloc(8, 0xff), Buffer.alloc(0)]);
      }
    } catch {
      // Closed.
    }
  }
}

function seqFrame(seq: bigint): Buffer {
  const frame = Buffer.alloc(8);
  frame.writeBigUInt64BE(seq);
  return frame;
}
