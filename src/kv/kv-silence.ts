/**
 * Whether a worker's KV events have gone silent while it had work. An idle engine publishes
 * nothing, so silence alone says nothing; what counts is work the worker was given and
 * finished: an engine that computed a prompt stored its blocks and published them.
 *
 * - `quiet`: nothing was sent since the last event (or ever); `lastEventAt` when one came.
 * - `waiting`: work was sent at `since` and no event has come since.
 * - `blind`: that lasted the silence limit: the view is not to be trusted.
 */
export type KvSilence =
  | { readonly phase: 'quiet'; readonly lastEventAt: number | undefined }
  | { readonly phase: 'waiting'; readonly since: number }
  | { readonly phase: 'blind'; readonly since: number };

/** What moves a {@link KvSilence}: work sent at `at`, an event at `at`, or the clock at `at`. */
export type KvSilenceInput =
  | { readonly type: 'sent'; readonly at: number }
  | { readonly type: 'event'; readonly at: number }
  | { readonly type: 'tick'; readonly at: number };

/** Where every view starts: nothing sent, nothing heard. */
export const KV_SILENCE_START: KvSilence = { phase: 'quiet', lastEventAt: undefined };

/**
 * The one transition of {@link KvSilence}. Work is dated when it was sent, and may be told
 * later (once the engine answered): an event that came after it was sent already covers it.
 * `silenceMs` 0 turns the rule off (nothing ever goes blind).
 *
 * @example
 * let state = KV_SILENCE_START;
 * state = nextKvSilence(state, { type: 'sent', at: 1_000 }, 30_000); // waiting since 1,000
 * state = nextKvSilence(state, { type: 'tick', at: 31_000 }, 30_000); // blind
 * state = nextKvSilence(state, { type: 'event', at: 31_500 }, 30_000); // quiet again
 */
export function nextKvSilence(state: KvSilence, input: KvSilenceInput, silenceMs: number): KvSilence {
  switch (input.type) {
    case 'event':
      return { phase: 'quiet', lastEventAt: input.at };
    case 'sent':
      if (silenceMs <= 0) return state;
      if (state.phase === 'quiet') {
        if (state.lastEventAt !== undefined && state.lastEventAt >= input.at) return state;
        return { phase: 'waiting', since: input.at };
      }
      // The silence runs from the oldest work not answered by an event.
      return input.at < state.since ? { ...state, since: input.at } : state;
    case 'tick':
      if (state.phase === 'waiting' && silenceMs > 0 && input.at - state.since >= silenceMs) {
        return { phase: 'blind', since: state.since };
      }
      return state;
  }
}

/** Options of {@link KvSilenceWatch}. */
export interface KvSilenceWatchOptions {
  /** How long work may go without an event before the view is blind; 0: never. */
  silenceMs: number;
  /** The view went blind: work was sent at `since` and nothing came since. Once per episode. */
  onBlind(since: number): void;
  /** The first event after a blind spell. */
  onRecovered(blindSince: number): void;
}

/**
 * Runs `nextKvSilence` (the one transition of the silence's phases) for one worker on the wall clock: a timer, `unref()`'d, armed
 * while work waits for its event, so that a view goes blind on time even when nothing else
 * happens. `blindCount` counts the episodes.
 *
 * @example
 * const watch = new KvSilenceWatch({
 *   silenceMs: 30_000,
 *   onBlind: () => index.setTrusted(worker, false),
 *   onRecovered: () => index.setTrusted(worker, true),
 * });
 * watch.sent(Date.now()); // a prefill was sent to the worker
 * watch.event(); // one of its KV event batches arrived
 * watch.close();
 */
export class KvSilenceWatch {
  readonly #options: KvSilenceWatchOptions;
  #state: KvSilence = KV_SILENCE_START;
  #timer: NodeJS.Timeout | undefined;
  #blindCount = 0;

  constructor(options: KvSilenceWatchOptions) {
    this.#options = options;
  }

  /** Where it stands. */
  get state(): KvSilence {
    return this.#state;
  }

  /** Whether the view is blind now. */
  get blind(): boolean {
    return this.#state.phase === 'blind';
  }

  /** How many times it went blind. */
  get blindCount(): number {
    return this.#blindCount;
  }

  /** Work sent at `at` (ms since the epoch) was done by the worker's engine. */
  sent(at: number): void {
    this.#move({ type: 'sent', at });
    this.#arm();
  }

  /** An event batch of the worker's arrived. */
  event(): void {
    const before = this.#state;
    this.#move({ type: 'event', at: Date.now() });
    this.#disarm();
    if (before.phase === 'blind') this.#options.onRecovered(before.since);
  }

  /** Stops its timer. */
  close(): void {
    this.#disarm();
  }

  #move(input: KvSilenceInput): void {
    const before = this.#state;
    this.#state = nextKvSilence(before, input, this.#options.silenceMs);
    if (before.phase !== 'blind' && this.#state.phase === 'blind') {
      this.#blindCount++;
      this.#options.onBlind(this.#state.since);
    }
  }

  #arm(): void {
    const state = this.#state;
    if (state.phase !== 'waiting') return;
    const due = Math.max(0, state.since + this.#options.silenceMs - Date.now());
    this.#disarm();
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      this.#move({ type: 'tick', at: Date.now() });
      this.#arm();
    }, due);
    this.#timer.unref();
  }

  #disarm(): void {
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#timer = undefined;
  }
}
