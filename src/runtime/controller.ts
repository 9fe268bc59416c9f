import { randomUUID } from 'node:crypto';

/**
 * The cancellation context of one request, as the reference's engines see it.
 *
 * Two strengths of cancellation: *stop* asks the engine to stop generating (it may still
 * finish the current step and send a terminal item), *kill* asks it to drop the request at
 * once. A killed context is also stopped. Neither can be undone.
 */
export interface AsyncEngineContext {
  /** The request id, shared by every leg of one request. */
  readonly id: string;
  /**
   * Aborts when the context stops (or is killed), so it can be handed to `fetch` or any
   * other API that takes an `AbortSignal`.
   */
  readonly signal: AbortSignal;
  /** Asks the engine to stop generating. Idempotent. */
  stopGenerating(): void;
  /** Alias of {@link stopGenerating}. */
  stop(): void;
  /** Asks the engine to drop the request at once; implies stopped. Idempotent. */
  kill(): void;
  /** True after stop or kill. */
  isStopped(): boolean;
  /** True after kill. */
  isKilled(): boolean;
  /** Resolves when the context is stopped (or killed). Never rejects. */
  stopped(): Promise<void>;
  /** Resolves when the context is killed. Never rejects. */
  killed(): Promise<void>;
  /**
   * Links a child context: stopping or killing this context does the same to the child
   * first. A child never stops its parent. Linking to an already stopped or killed parent
   * stops or kills the child at once.
   */
  linkChild(child: AsyncEngineContext): void;
}

/** True when `value` looks like an {@link AsyncEngineContext} (it can be stopped). */
export function isContext(value: unknown): value is AsyncEngineContext {
  return (
    typeof value === 'object' &&
    value !== null &&
    typeof (value as { stopGenerating?: unknown }).stopGenerating === 'function'
  );
}

const LIVE = 0;
const STOPPED = 1;
const KILLED = 2;
type State = typeof LIVE | typeof STOPPED | typeof KILLED;

/** A promise made on first request and resolved once; it never rejects. */
class Latch {
  #promise: Promise<void> | undefined;
  #resolve: (() => void) | undefined;
  #open = false;

  wait(): Promise<void> {
    if (this.#open) return Promise.resolve();
    this.#promise ??= new Promise<void>((resolve) => {
      this.#resolve = resolve;
    });
    return this.#promise;
  }

  open(): void {
    this.#open = true;
    this.#resolve?.();
    this.#resolve = undefined;
  }
}

/**
 * The standard {@link AsyncEngineContext}.
 *
 * @example
 * const context = new Controller('req-42');
 * fetch(url, { signal: context.signal });
 * context.stopGenerating(); // aborts the fetch, resolves context.stopped()
 */
export class Controller implements AsyncEngineContext {
  readonly id: string;
  #state: State = LIVE;
  #children: AsyncEngineContext[] = [];
  #abort: AbortController | undefined;
  // Guards against a cycle of links recursing forever while a stop propagates.
  #propagating = false;
  readonly #stopped = new Latch();
  readonly #killed = new Latch();

  /**
   * @param id the request id; a random UUID when omitted.
   * @throws {TypeError} when `id` is given but is not a non-empty string.
   */
  constructor(id?: string) {
    if (id !== undefined && (typeof id !== 'string' || id === '')) {
      throw new TypeError(
        `Controller id must be a non-empty string, got ${typeof id === 'string' ? 'an empty string' : typeof id}`,
      );
    }
    this.id = id ?? randomUUID();
  }

  get signal(): AbortSignal {
    if (this.#abort === undefined) {
      this.#abort = new AbortController();
      if (this.#state !== LIVE) this.#abort.abort(this.#reason());
    }
    return this.#abort.signal;
  }

  stopGenerating(): void {
    this.#escalate(STOPPED);
  }

  stop(): void {
    this.#escalate(STOPPED);
  }

  kill(): void {
    this.#escalate(KILLED);
  }

  isStopped(): boolean {
    return this.#state !== LIVE;
  }

  isKilled(): boolean {
    return this.#state === KILLED;
  }

  stopped(): Promise<void> {
    return this.#stopped.wait();
  }

  killed(): Promise<void> {
    return this.#killed.wait();
  }

  linkChild(child: AsyncEngineContext): void {
    if (!isContext(child) || typeof child.kill !== 'function') {
      throw new TypeError('linkChild expects an AsyncEngineContext (an object with stopGenerating() and kill())');
    }
    if (child === this) throw new TypeError('A context cannot be linked as its own child');
    this.#children.push(child);
    if (this.#state === KILLED) child.kill();
    else if (this.#state === STOPPED) child.stopGenerating();
  }

  #escalate(target: State): void {
    if (this.#state >= target || this.#propagating) return;
    this.#propagating = true;
    try {
      for (const child of this.#children) {
        if (target === KILLED) child.kill();
        else child.stopGenerating();
      }
    } finally {
      this.#propagating = false;
    }
    this.#state = target;
    // Both are idempotent: a kill after a stop changes neither the latch nor the signal.
    this.#stopped.open();
    this.#abort?.abort(this.#reason());
    if (target === KILLED) this.#killed.open();
  }

  #reason(): DOMException {
    const how = this.#state === KILLED ? 'killed' : 'stopped';
    return new DOMException(`Request ${this.id} was ${how}`, 'AbortError');
  }
}
