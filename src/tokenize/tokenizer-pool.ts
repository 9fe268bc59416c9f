import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import { branded, DisaggError } from '../util/disagg-error.js';

/** The router's tokenizer could not be loaded (a directory without `tokenizer.json`, say). */
export class TokenizerError extends DisaggError {
  static override readonly is = branded<TokenizerError>('TokenizerError');
  declare readonly code: 'DISAGG_TOKENIZER';

  constructor(message: string, options?: { cause?: unknown }) {
    super('DISAGG_TOKENIZER', message, options);
  }
}

/** Options of {@link TokenizerPool.start}. */
export interface TokenizerPoolOptions {
  /** A directory with a Hugging Face `tokenizer.json` and a `tokenizer_config.json` (its chat template). */
  dir: string;
  /** Worker threads; 1 by default. */
  threads?: number | undefined;
  /** Characters of prompt pieces whose ids each thread remembers (a conversation's earlier turns); 8 Mi by default. */
  cacheChars?: number | undefined;
  /**
   * Hugging Face's native tokenizer (the optional `tokenizers` package) where it loads; true
   * by default. False: the JavaScript port `@huggingface/tokenizers` always (the same ids,
   * 2 to 3.5 times slower).
   */
  native?: boolean | undefined;
  /** @internal The native package's name: another one makes its load fail, for the fallback's tests. */
  nativePackage?: string | undefined;
}

/**
 * Which encoder the threads use, and why not the native one when they do not; `parts`: a long
 * prompt is encoded in parts at once (the tokenizer's pre-tokenizer lets it be cut at a space
 * before a word without changing an id, as GPT-2's, Qwen's and Llama 3's do).
 */
export type TokenizerEncoder = { kind: 'native'; parts: boolean } | { kind: 'js'; why: string };

type Pending = { resolve: (answer: number[] | string | undefined) => void; reject: (error: Error) => void };

/**
 * The router's own tokenizer, off the event loop: worker threads that each load a Hugging Face
 * `tokenizer.json` (with Hugging Face's native tokenizer where the optional `tokenizers`
 * package loads, else its JavaScript port: the same ids) and render chat requests with the chat template of `tokenizer_config.json`
 * as vLLM's chat endpoint does (`add_generation_prompt`, `continue_final_message`, `tools`,
 * `chat_template_kwargs`), then encode them; a completion's text prompt is encoded with the
 * tokenizer's special tokens, as vLLM does. Requests go to the thread with the fewest in flight.
 * Pieces of text between special tokens are remembered (they encode alone), so a conversation's
 * earlier turns are not encoded again. `close()` ends the threads.
 *
 * @example
 * const tokenizer = await TokenizerPool.start({ dir: '/models/Qwen3-8B' });
 * const ids = await tokenizer.tokenize({ messages: [{ role: 'user', content: 'Hi' }] }, 'chat');
 */
export class TokenizerPool {
  readonly #threads: Array<{ worker: Worker; inFlight: number }>;
  readonly #pending = new Map<number, Pending>();
  #next = 0;
  #closed = false;
  /** The encoder the threads loaded: `native`, or `js` and why the native one did not load. */
  readonly encoder: TokenizerEncoder;

  private constructor(threads: Worker[], encoder: TokenizerEncoder) {
    this.encoder = encoder;
    this.#threads = threads.map((worker) => ({ worker, inFlight: 0 }));
    for (const thread of this.#threads) {
      thread.worker.on('message', (message: { id: number; ids?: Uint32Array; text?: string; error?: string }) => {
        const pending = this.#pending.get(message.id);
        if (pending === undefined) return;
        this.#pending.delete(message.id);
        thread.inFlight--;
        if (message.error !== undefined) pending.reject(new TokenizerError(`Tokenizing failed: ${message.error}`));
        else if (message.text !== undefined) pending.resolve(message.text);
        else pending.resolve(message.ids === undefined ? undefined : Array.from(message.ids));
      });
      // A thread that dies takes its answers with it: nothing waits for them forever.
      const died = (why: unknown) => {
        if (this.#closed) return;
        this.#closed = true;
        for (const pending of this.#pending.values()) {
          pending.reject(new TokenizerError(`A tokenizer thread died: ${String(why)}`, { cause: why }));
        }
        this.#pending.clear();
      };
      thread.worker.on('error', died);
      thread.worker.on('exit', (code) => died(`exit ${code}`));
    }
  }

  /**
   * Starts the threads and waits until each has loaded the tokenizer.
   *
   * @throws {TokenizerError} for a directory without `tokenizer.json`, or one that does not load.
   */
  static async start(options: TokenizerPoolOptions): Promise<TokenizerPool> {
    if (!existsSync(join(options.dir, 'tokenizer.json'))) {
      throw new TokenizerError(
        `--tokenizer ${options.dir} has no tokenizer.json: give the directory of a Hugging Face model (tokenizer.json and tokenizer_config.json)`,
      );
    }
    const script = threadScript();
    const threads = Array.from(
      { length: Math.max(1, options.threads ?? 1) },
      () =>
        new Worker(script, {
          workerData: {
            dir: options.dir,
            cacheChars: options.cacheChars ?? 8 * 1024 * 1024,
            native: options.native ?? true,
            nativePackage: options.nativePackage,
          },
        }),
    );
    let encoder: TokenizerEncoder = { kind: 'native', parts: true };
    try {
      await Promise.all(
        threads.map(
          (worker) =>
            new Promise<void>((resolve, reject) => {
              worker.once('message', (ready: { encoder: 'native' | 'js'; why?: string; parts: boolean }) => {
                if (ready.encoder === 'js') encoder = { kind: 'js', why: ready.why ?? 'unknown' };
                else if (encoder.kind === 'native') encoder = { kind: 'native', parts: ready.parts };
                resolve();
              });
              worker.once('error', reject);
              worker.once('exit', (code) => reject(new Error(`the tokenizer thread exited (${code})`)));
            }),
        ),
      );
    } catch (error) {
      await Promise.all(threads.map((worker) => worker.terminate()));
      throw new TokenizerError(`The tokenizer in ${options.dir} did not load: ${(error as Error).message}`, {
        cause: error,
      });
    }
    for (const worker of threads) {
      worker.removeAllListeners('exit');
      worker.removeAllListeners('error');
    }
    return new TokenizerPool(threads, encoder);
  }

  /**
   * The prompt token ids of a request of `route` (`chat`: its messages rendered with the chat
   * template; `completions`: its text `prompt`; `generate`: SGLang's `text`); undefined when it
   * has no text prompt.
   *
   * @throws {TokenizerError} when the template or the tokenizer fails on it.
   */
  tokenize(
    body: Readonly<Record<string, unknown>>,
    route: 'chat' | 'completions' | 'generate',
  ): Promise<number[] | undefined> {
    return this.#ask({ body, route }) as Promise<number[] | undefined>;
  }

  /**
   * The text of token ids, special tokens kept, as vLLM's `/detokenize` answers.
   *
   * @example
   * await tokenizer.detokenize([9707, 11]); // 'Hello,'
   * @throws {TokenizerError} for ids the tokenizer cannot decode, or once closed.
   */
  detokenize(ids: readonly number[]): Promise<string> {
    return this.#ask({ decode: [...ids] }) as Promise<string>;
  }

  /** Sends a question to the thread with the fewest in flight. */
  #ask(question: Record<string, unknown>): Promise<number[] | string | undefined> {
    if (this.#closed) return Promise.reject(new TokenizerError('The tokenizer is closed'));
    let thread = this.#threads[0] as { worker: Worker; inFlight: number };
    for (const each of this.#threads) if (each.inFlight < thread.inFlight) thread = each;
    const id = this.#next++;
    thread.inFlight++;
    return new Promise((resolve, reject) => {
      this.#pending.set(id, { resolve, reject });
      thread.worker.postMessage({ id, ...question });
    });
  }

  /** Ends the threads; tokenizations under way reject. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await Promise.all(this.#threads.map((thread) => thread.worker.terminate()));
    for (const pending of this.#pending.values()) pending.reject(new TokenizerError('The tokenizer was closed'));
    this.#pending.clear();
  }
}

/** Where the thread's script is: beside this module in the sources, beside the bundle in dist/. */
function threadScript(): string {
  // tsup shims import.meta.url in the CommonJS build.
  const here = dirname(fileURLToPath(import.meta.url));
  for (const name of ['tokenizer-thread.mjs', 'tokenizer-thread.js', 'tokenize/tokenizer-thread.mjs']) {
    const path = join(here, name);
    if (existsSync(path)) return path;
  }
  throw new TokenizerError(`The tokenizer thread's script is missing beside ${here}`);
}
