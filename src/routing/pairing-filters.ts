// Filters that pair a leg with the legs picked before it in the same decision (llm-d's cycle
// state): a decode worker of the prefill worker's model revision, say, since KV computed by one
// revision's weights is not the other's. They read `RoutingInput.picked`, which the Scheduler
// fills as it picks the legs in order.
import type { RoutingInput } from './routing-input.js';
import type { Filter } from './scoring.js';
import { attributeOf, WORKER_ATTRIBUTES } from './worker-attributes.js';
import { NoWorkerError } from './worker-pool.js';

/** What {@link sameLabelFilter} does when no candidate has the earlier legs' value. */
export type Unpaired = 'any' | 'fail';

/** The values {@link Unpaired} takes, for the settings' check. */
export const UNPAIRED: readonly Unpaired[] = ['any', 'fail'];

/**
 * Keeps the candidates whose attribute `key` ({@link WORKER_ATTRIBUTES}, or a label of your own)
 * has the value of the workers the earlier legs of the decision picked: with the default key,
 * decode workers of the prefill worker's model revision. Nothing is filtered for the first leg,
 * nor when no earlier pick has the attribute. When no candidate has it, `unpaired` says what
 * then: `'any'` (the default) goes on with every candidate, as a filter that would empty the
 * list does; `'fail'` refuses the pick with a {@link NoWorkerError} saying why.
 *
 * @example
 * const paired = new WorkerPool([{ url: 'http://d0:8000', attributes: { 'disagg.ai/revision': 'v2' } }], {
 *   selection: scoredPolicy({ filters: [sameLabelFilter()], scorers: [{ scorer: loadScorer(), weight: 1 }] }),
 * });
 * new Scheduler({ prefillWorkers, decodeWorkers: paired }).decide(new RoutingInput({ prompt: 'Hi' })); // decode of the prefill worker's revision
 *
 * @throws {NoWorkerError} from `filter`, with `unpaired: 'fail'`, when no candidate pairs.
 */
export function sameLabelFilter<W>(key: string = WORKER_ATTRIBUTES.revision, unpaired: Unpaired = 'any'): Filter<W> {
  return {
    name: 'same-label',
    filter(candidates: readonly W[], _load: unknown, input: RoutingInput | undefined): readonly W[] {
      const wanted = earlierValue(input, key);
      if (wanted === undefined) return candidates;
      const kept = candidates.filter((worker) => attributeOf(worker, key) === wanted);
      if (kept.length === 0 && unpaired === 'fail') {
        throw new NoWorkerError(
          candidates.length,
          undefined,
          undefined,
          `none of its ${candidates.length} candidates has ${key}=${wanted}, as the earlier leg's worker does`,
        );
      }
      return kept;
    },
  };
}

/**
 * The value of `key` the earlier legs' workers share: the last one picked that has it (the
 * legs pair with each other in turn, so those before it hold it too).
 */
function earlierValue(input: RoutingInput | undefined, key: string): string | undefined {
  let value: string | undefined;
  for (const worker of input?.picked.values() ?? []) value = attributeOf(worker, key) ?? value;
  return value;
}
