import type { Dispatcher } from 'undici';
import { MAX_MODEL_NAME } from '../../endpoints/schema-parts.js';
import { parseJson } from '../../http/json.js';
import { request } from '../../http/undici-parts.js';
import type { Logger } from '../../runtime/logger.js';
import { joinUrl } from '../../util/url.js';

/** What is known of the served models: their context length (vLLM's and SGLang's `max_model_len`). */
export interface ModelLimits {
  /** The context length of `model` (or of the only model served, when the request names none). */
  maxModelLen(model: unknown): number | undefined;
  /** The base model of the LoRA adapter `model`, where the workers say (their `/v1/models`' `parent`). */
  baseOf?(model: unknown): string | undefined;
}

/**
 * The most model ids kept of what the workers list: each is a metrics label value, so a worker
 * serving thousands of adapters must not make thousands of series (the rest count as `other`).
 */
const MAX_LISTED = 256;

/** Options of {@link ServedModels}. */
interface ServedModelsOptions {
  headers: Record<string, string>;
  dispatcher: Dispatcher;
  logger: Logger;
  /** How the log names a worker (membership's names); none by default. */
  nameOf?: ((worker: { url: string }) => string) | undefined;
}

/**
 * The context length of each model the decode workers serve, and the base of each LoRA adapter
 * they list (`parent`), read from their `/v1/models`
 * (vLLM and SGLang report `max_model_len` per model): the smallest any worker reports, since a
 * request may land on any of them. Refreshed by `refresh()` (at start and on every round of
 * health probes); a worker that does not answer, or a model without the field, adds nothing,
 * and a model nobody reported is not checked.
 *
 * @internal
 */
export class ServedModels implements ModelLimits {
  #limits = new Map<string, number>();
  /** Each LoRA adapter the workers list, and its base model (vLLM's `parent`). */
  #parents = new Map<string, string>();
  /** Every model id the workers list (base models and adapters), bounded by {@link MAX_LISTED}. */
  #listed = new Set<string>();
  readonly #options: ServedModelsOptions;

  constructor(options: ServedModelsOptions) {
    this.#options = options;
  }

  /** The context of `model`; of the only model known when the request names none. */
  maxModelLen(model: unknown): number | undefined {
    if (typeof model === 'string') return this.#limits.get(model);
    if (model === undefined || model === null) {
      return this.#limits.size === 1 ? [...this.#limits.values()][0] : undefined;
    }
    return undefined;
  }

  /** The base model of the LoRA adapter `model`, as the workers list it (`parent`); undefined for any other. */
  baseOf(model: unknown): string | undefined {
    return typeof model === 'string' ? this.#parents.get(model) : undefined;
  }

  /** Whether a worker listed `model` in its `/v1/models` at the last refresh (a name it serves, not one a client made up). */
  lists(model: unknown): boolean {
    return typeof model === 'string' && this.#listed.has(model);
  }

  /** Asks each worker for its models, within `timeoutMs` each. */
  async refresh(workers: readonly { url: string }[], timeoutMs = 2000): Promise<void> {
    const limits = new Map<string, number>();
    const parents = new Map<string, string>();
    const listed = new Set<string>();
    await Promise.all(
      workers.map(async (worker) => {
        try {
          const answer = await request(joinUrl(worker.url, '/v1/models'), {
            headers: this.#options.headers,
            signal: AbortSignal.timeout(timeoutMs),
            dispatcher: this.#options.dispatcher,
          });
          const text = await answer.body.text();
          if (answer.statusCode !== 200) return;
          const data = (parseJson(text) as { data?: unknown })?.data;
          if (!Array.isArray(data)) return;
          for (const entry of data as Array<{ id?: unknown; max_model_len?: unknown; parent?: unknown }>) {
            const { id, max_model_len: length, parent } = entry ?? {};
            if (typeof id === 'string' && id.length <= MAX_MODEL_NAME && listed.size < MAX_LISTED) listed.add(id);
            if (typeof id === 'string' && typeof parent === 'string' && parent !== '' && parent !== id)
              parents.set(id, parent);
            if (typeof id !== 'string' || typeof length !== 'number' || !(length > 0)) continue;
            limits.set(id, Math.min(limits.get(id) ?? length, length));
          }
        } catch (error) {
          this.#options.logger.debug(
            { ...named(this.#options.nameOf, worker), err: error },
            'Could not read the models of a worker',
          );
        }
      }),
    );
    // Kept when no worker answered: the last known limits stay better than none.
    if (limits.size > 0) this.#limits = limits;
    if (limits.size > 0 || parents.size > 0) this.#parents = parents;
    if (listed.size > 0) this.#listed = listed;
  }
}

/** How the log names a worker: its name where one is known, and its address. */
function named(
  nameOf: ((worker: { url: string }) => string) | undefined,
  worker: { url: string },
): { worker?: string; url: string } {
  return nameOf === undefined ? { url: worker.url } : { worker: nameOf(worker), url: worker.url };
}
