// A fake worker's simulated engine: its answers timed by a SimEngine on a real-time clock (sped
// up for tests), its /metrics read off the engine's queues, its KV events what the engine's
// cache stored and dropped. The HTTP side stays the fake worker's; this is what the engine
// does with each call: a prefill computes the prompt and holds its KV for the decode side, a
// decode receives that KV over the profile's link and decodes, a plain call does both.
//
// The prefill's KV is let go as vLLM's NIXL connector lets it go: once the decode side has read
// it. Here the decode side's claim of the handoff (its read, SGLang's bootstrap) arrives when
// its request does; the blocks are released the profile's transfer time of the whole prompt
// later (what the decode side already held is not subtracted: prefill cannot know it). A
// handoff nobody claims is released when the worker's KV timeout strands it (vLLM's lease,
// `kvTimeoutMs`, in wall ms) or at once when the decode side gives it up.

import type { EngineLoad } from '../protocol/engines/load-metrics.js';
import type { KvNode, KvTreeEvent } from '../simulation/kv-tree.js';
import { transferMs } from '../simulation/profile-timing.js';
import type { EngineProfile } from '../simulation/profile-types.js';
import { RealtimeClock } from '../simulation/realtime-clock.js';
import { contextLimit } from '../simulation/replay.js';
import { SimEngine } from '../simulation/sim-engine.js';
import { tokenBlocks } from '../simulation/token-blocks.js';
import { TRACE_BLOCK_TOKENS } from '../simulation/trace.js';
import type { FakeKvEvent, FakeKvPublisher } from './fake-kv-publisher.js';
import { promptTokens } from './fake-plan.js';
import type { FakeRequest } from './fake-types.js';
import type { KvHandoff } from './kv-ledger.js';

/** Options of a fake worker's simulated engine (`FakeWorkerOptions.simulated`). */
export interface FakeSimulationOptions {
  /** The engine's timing and memory: a built-in profile (`readProfile`) or one's own. */
  readonly profile: EngineProfile;
  /** Virtual ms per wall ms; 1 by default (real time). Tests run it 100 or 1,000 times faster. */
  readonly speedup?: number | undefined;
}

/** A prompt as the engine takes it: its token ids and their blocks. */
export interface SimPrompt {
  readonly tokens: readonly number[];
  readonly blocks: readonly number[];
}

/**
 * The pace of one answer's tokens: {@link next} resolves as the engine produces each, in turn;
 * {@link finished} once it has produced the last.
 */
export class TokenPace {
  #produced = 0;
  #taken = 0;
  #done = false;
  readonly #waiting: Array<{ index: number; wake: () => void }> = [];
  readonly finished: Promise<void>;
  #finish: () => void = () => {};
  /** The virtual time of each token produced, in order. */
  readonly times: number[] = [];
  /** The virtual time its job was put on the engine. */
  readonly startedAt: number;
  /** Ends the job on the engine (set once it is submitted). */
  #cancel: () => void = () => {};

  constructor(startedAt: number) {
    this.startedAt = startedAt;
    this.finished = new Promise((resolve) => {
      this.#finish = resolve;
    });
  }

  /** Resolves once the engine has produced the next token this answer takes (at once past its last). */
  next(): Promise<void> {
    const index = this.#taken++;
    if (index < this.#produced || this.#done) return Promise.resolve();
    return new Promise((wake) => this.#waiting.push({ index, wake }));
  }

  /**
   * Its caller left: the engine drops the job and gives its blocks back, as vLLM aborts a
   * request whose connection closed. Nothing once the answer is whole.
   */
  cancel(): void {
    if (!this.#done) this.#cancel();
  }

  /** @internal How {@link cancel} ends the job. */
  cancelWith(cancel: () => void): void {
    this.#cancel = cancel;
  }

  /** @internal The engine produced a token at `at`. */
  token(at: number): void {
    this.#produced++;
    this.times.push(at);
    this.#wake((index) => index < this.#produced);
  }

  /** @internal The engine is done with the job. */
  done(): void {
    this.#done = true;
    this.#wake(() => true);
    this.#finish();
  }

  #wake(due: (index: number) => boolean): void {
    for (let i = 0; i < this.#waiting.length; ) {
      const waiter = this.#waiting[i] as { index: number; wake: () => void };
      if (due(waiter.index)) {
        this.#waiting.splice(i, 1);
        waiter.wake();
      } else i++;
    }
  }
}

/** What a fake worker's decode call asks of its simulated engine. */
export interface SimulatedDecode {
  /** The answer's length when neither the worker's `tokens` nor the request caps it: what the context leaves. */
  tokensLeft(body: Record<string, unknown>): number;
  /**
   * Puts the call's job on the engine: `decode` with the prefill's KV to receive, `whole` to
   * compute the prompt too. Its tokens come at the pace returned.
   */
  generate(record: FakeRequest, kind: 'decode' | 'whole', outputTokens: number): Promise<TokenPace>;
}

/** A prefill call's KV on the engine, until the decode side has it. */
interface Hold {
  job: number;
  inputTokens: number;
  prefilled: boolean;
  /** Its prefill call's answer is over (sent, or its caller left). */
  answered: boolean;
  /** Handoffs committed for it and still held. */
  open: number;
  /** The virtual time its KV may go, at the earliest. */
  releaseAt: number;
}

/**
 * The simulated engine of one fake worker, and what it publishes: KV events for each whole
 * 512-token block of a prompt its cache stores or drops (block size 512, the block's token
 * ids, the engine's handle of the block and of its parent), in one batch per engine step.
 * Partial last blocks are never published, as an engine publishes only full blocks.
 *
 * @example
 * const simulation = new FakeSimulation({ profile: await readProfile(DEFAULT_PROFILE), speedup: 100 });
 * const pace = simulation.generate(simulation.prompt([1, 2, 3]), 4, 'whole');
 * await pace.finished;
 * simulation.close();
 */
export class FakeSimulation {
  readonly profile: EngineProfile;
  readonly clock: RealtimeClock;
  readonly engine: SimEngine;
  readonly #publisher: FakeKvPublisher | undefined;
  /** The token ids of the blocks the engine may publish: refs from jobs and from the cache. */
  readonly #blockTokens = new Map<number, { tokens: readonly number[]; refs: number }>();
  readonly #handles = new WeakMap<KvNode, number>();
  #nextHandle = 1;
  #batch: FakeKvEvent[] = [];
  #publishing: Promise<unknown> = Promise.resolve();
  readonly #holds = new Map<object, Hold>();
  /** Prefill calls whose answer was over before their job was on the engine (a caller that left). */
  readonly #answeredEarly = new WeakSet<object>();

  constructor(options: FakeSimulationOptions, publisher?: FakeKvPublisher) {
    this.profile = options.profile;
    this.clock = new RealtimeClock({ speedup: options.speedup });
    this.#publisher = publisher;
    this.engine = new SimEngine({ profile: options.profile, clock: this.clock, onKvEvent: (e) => this.#kvEvent(e) });
  }

  /** Its load as its /metrics reports it. */
  load(): EngineLoad {
    return this.engine.load();
  }

  /** The longest request (prompt and answer) it takes: its context, or what its KV cache holds. */
  get contextTokens(): number {
    return contextLimit(this.profile);
  }

  /** A prompt's blocks, from its token ids. */
  prompt(tokens: readonly number[]): SimPrompt {
    return { tokens, blocks: tokenBlocks(tokens) };
  }

  /**
   * Computes a prefill call's prompt: resolves once it is computed, with the tokens found in
   * the cache. Its KV stays held for the decode side: see {@link handoff} and {@link answered},
   * by which `owner` (the call) lets it go.
   */
  prefill(owner: object, prompt: SimPrompt): Promise<number> {
    return new Promise((resolve) => {
      let cached = 0;
      const hold: Hold = {
        job: -1,
        inputTokens: prompt.tokens.length,
        prefilled: false,
        answered: this.#answeredEarly.has(owner),
        open: 0,
        releaseAt: 0,
      };
      hold.job = this.clock.run(() =>
        this.#submit(prompt, 0, 'prefill', {
          admitted: (_at, tokens) => {
            cached = tokens;
          },
          prefilled: () => {
            hold.prefilled = true;
            resolve(cached);
            this.#settle(owner);
          },
        }),
      );
      this.#holds.set(owner, hold);
    });
  }

  /**
   * A handoff of `owner`'s KV changed (the fake worker's ledger says): committed, claimed by the
   * decode side (released a transfer's time later), or freed unclaimed (released now).
   */
  handoff(handoff: KvHandoff, owner: object | undefined): void {
    const hold = owner === undefined ? undefined : this.#holds.get(owner);
    if (hold === undefined) return;
    if (handoff.state === 'held') {
      hold.open++;
      return;
    }
    hold.open--;
    if (handoff.state === 'claimed') {
      hold.releaseAt = Math.max(hold.releaseAt, this.clock.now + transferMs(this.profile, hold.inputTokens));
    }
    this.#settle(owner as object);
  }

  /** `owner`'s prefill answer is over (sent, or its caller left): its KV goes once no handoff holds it. */
  answered(owner: object): void {
    const hold = this.#holds.get(owner);
    if (hold === undefined) {
      this.#answeredEarly.add(owner);
      return;
    }
    hold.answered = true;
    this.#settle(owner);
  }

  /**
   * Decodes an answer of `outputTokens` tokens: `decode` after receiving the prompt's KV from a
   * prefill worker (over the profile's link), `whole` computing the prompt first.
   */
  generate(prompt: SimPrompt, outputTokens: number, kind: 'decode' | 'whole'): TokenPace {
    return this.clock.run(() => {
      const pace = new TokenPace(this.clock.now);
      const job = this.#submit(prompt, Math.max(1, outputTokens), kind, {
        token: (at) => pace.token(at),
        done: () => pace.done(),
      });
      pace.cancelWith(() => this.clock.run(() => this.engine.cancel(job)));
      return pace;
    });
  }

  /** What its worker's decode calls ask of it, their prompts' token ids read by `promptIds`. */
  decodeSide(promptIds: (record: FakeRequest) => Promise<number[]> | number[]): SimulatedDecode {
    return {
      tokensLeft: (body) => Math.max(1, this.contextTokens - promptTokens(body)),
      generate: async (record, kind, outputTokens) =>
        this.generate(this.prompt(await promptIds(record)), outputTokens, kind),
    };
  }

  /** Stops its clock: nothing it has pending runs. */
  close(): void {
    this.clock.close();
  }

  #submit(
    prompt: SimPrompt,
    outputTokens: number,
    kind: 'prefill' | 'decode' | 'whole',
    listener: Parameters<SimEngine['submit']>[1],
  ): number {
    const { tokens, blocks } = prompt;
    // Longer than its KV cache holds, a job would wait first in line for ever, and all behind it.
    if (tokens.length >= this.contextTokens) {
      throw new RangeError(
        `a prompt of ${tokens.length} tokens does not fit the simulated engine's context of ${this.contextTokens} tokens`,
      );
    }
    const output = Math.min(outputTokens, this.contextTokens - tokens.length);
    for (let k = 0; k < blocks.length; k++) {
      const id = blocks[k] as number;
      const known = this.#blockTokens.get(id);
      if (known !== undefined) known.refs++;
      else {
        const ids = tokens.slice(k * TRACE_BLOCK_TOKENS, (k + 1) * TRACE_BLOCK_TOKENS);
        this.#blockTokens.set(id, { tokens: ids, refs: 1 });
      }
    }
    const done = listener?.done;
    return this.engine.submit(
      { blocks, inputTokens: tokens.length, outputTokens: output, kind },
      {
        ...listener,
        done: (at) => {
          for (const id of blocks) this.#unref(id);
          done?.(at);
        },
      },
    );
  }

  #settle(owner: object): void {
    const hold = this.#holds.get(owner);
    if (hold === undefined || !hold.prefilled || !hold.answered || hold.open > 0) return;
    this.#holds.delete(owner);
    this.clock.at(hold.releaseAt, () => this.engine.released(hold.job));
  }

  #unref(id: number): void {
    const known = this.#blockTokens.get(id);
    if (known === undefined) return;
    if (--known.refs <= 0) this.#blockTokens.delete(id);
  }

  #handle(node: KvNode): number {
    let handle = this.#handles.get(node);
    if (handle === undefined) {
      handle = this.#nextHandle++;
      this.#handles.set(node, handle);
    }
    return handle;
  }

  #kvEvent({ kind, node }: KvTreeEvent): void {
    const known = this.#blockTokens.get(node.id);
    if (kind === 'stored') {
      if (known !== undefined) known.refs++;
    } else {
      this.#unref(node.id);
    }
    // A router keys whole blocks only: a prompt's shorter last block is never published.
    if (this.#publisher === undefined || node.tokens < TRACE_BLOCK_TOKENS) return;
    if (kind === 'removed') {
      this.#queue({ type: 'BlockRemoved', block_hashes: [this.#handle(node)] });
    } else if (known !== undefined) {
      this.#queue({
        type: 'BlockStored',
        block_hashes: [this.#handle(node)],
        parent_block_hash: node.parent === undefined ? null : this.#handle(node.parent),
        token_ids: [...known.tokens],
        block_size: TRACE_BLOCK_TOKENS,
      });
    }
  }

  /** Gathers the events of one engine step into one batch, published in order once the step is over. */
  #queue(event: FakeKvEvent): void {
    if (this.#batch.length === 0) queueMicrotask(() => this.#flush());
    this.#batch.push(event);
  }

  #flush(): void {
    const batch = this.#batch;
    this.#batch = [];
    const publisher = this.#publisher as FakeKvPublisher;
    // One send at a time, in order: a closed publisher's sends are dropped.
    this.#publishing = this.#publishing.then(() => publisher.publish(batch)).catch(() => {});
  }
}
