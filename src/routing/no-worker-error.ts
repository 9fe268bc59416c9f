// A pool with no worker to give: its own error, named by the pool and the model, never an address.
import { FAILURE_RULES } from '../protocol/failure-rules.js';
import { branded, DisaggError } from '../util/disagg-error.js';

/**
 * Every worker of a pool is out of rotation (marked down by health checks, or draining), or it
 * has none. The message names the pool (`prefill`, `decode`) and the model it serves where the
 * thrower knows them (a `Scheduler` given its `model` does), never a worker's address.
 *
 * @example
 * new NoWorkerError(1, 'decode', 'qwen3').message;
 * // 'No decode worker is available for model "qwen3": the decode pool's one worker is out of rotation'
 */
export class NoWorkerError extends DisaggError {
  static override readonly is = branded<NoWorkerError>('NoWorkerError');
  declare readonly code: 'DISAGG_NO_WORKER';
  readonly kind = 'no_worker';
  /** False: no worker of the pool is in rotation to send it to (`FAILURE_RULES.other`). */
  readonly retryable: boolean = FAILURE_RULES.other.retry;
  /** The pool that had none (`prefill`, `decode`), when the thrower named it. */
  readonly pool: string | undefined;
  /** The model that pool serves, when the thrower named it. */
  readonly model: string | undefined;
  /**
   * Why none would do when workers are in rotation (a filter that requires a pairing none
   * offers), said in the message instead of the rotation; undefined for a pool out of rotation.
   */
  readonly why: string | undefined;

  /**
   * @param size the pool's workers, none of them in rotation
   * @param pool which pool (`prefill`, `decode`); none by default
   * @param model the model it serves; none by default
   * @param why why none would do although some are in rotation; none by default
   */
  constructor(size: number, pool?: string, model?: string, why?: string) {
    const which = pool === undefined ? 'worker' : `${pool} worker`;
    const forModel = model === undefined ? '' : ` for model ${JSON.stringify(model)}`;
    const thePool = pool === undefined ? 'the pool' : `the ${pool} pool`;
    super(
      'DISAGG_NO_WORKER',
      `No ${which} is available${forModel}: ${
        why !== undefined
          ? why
          : size === 0
            ? `${thePool} has none (none configured or discovered yet)`
            : size === 1
              ? `${thePool}'s one worker is out of rotation`
              : `all ${size} workers of ${thePool} are out of rotation`
      }`,
    );
    this.pool = pool;
    this.model = model;
    this.why = why;
  }
}
