import type { RequestBody } from '../flow/request-shaping.js';
import { createPolicy, type PolicyName, type RoutingServices } from '../routing/registry.js';
import { RoutingInput } from '../routing/routing-input.js';
import type { Selection, WorkerPool } from '../routing/worker-pool.js';
import type { ResolvedProxyOptions } from './settings/types.js';

/**
 * The selection of one pool for `--prefill-policy` or `--decode-policy`: the registry's
 * plugin of that name, made for this pool alone (a cache-aware tree describes one pool's caches).
 */
export function selectionFor<W extends { url: string }>(
  name: PolicyName,
  routing: ResolvedProxyOptions['routing'],
  services: RoutingServices<W> = {},
): Selection<W> {
  return createPolicy<W>(name, routing, services);
}

/**
 * Conditional disaggregation, built in: the reason to serve a request on decode alone (a
 * prompt shorter than `aggregateBelowChars`; a decode worker known, by the decode pool's
 * policy (`cachedShare`), to hold more than `aggregateCachedRatio` of it), or undefined to
 * disaggregate it. Undefined when both are off.
 */
export function conditionalAggregation<W>(
  routing: ResolvedProxyOptions['routing'],
  decodeWorkers: WorkerPool<W>,
  decodeSelection: Selection<W>,
): ((request: RequestBody, given?: RoutingInput) => string | undefined) | undefined {
  const { aggregateBelowChars, aggregateCachedRatio } = routing;
  // Asked through the policy's own interface: whatever it knows the caches by (today a tree of
  // what this router sent; the engines' KV events tomorrow), not its private state.
  const policy = typeof decodeSelection === 'object' ? decodeSelection : undefined;
  const cachedShare = aggregateCachedRatio > 0 ? policy?.cachedShare?.bind(policy) : undefined;
  if (aggregateBelowChars === 0 && cachedShare === undefined) return undefined;
  return (request, given) => {
    // The flow's own input: its token ids too, when the proxy's tokenizer made them.
    const input = given ?? new RoutingInput(request);
    const text = input.text;
    if (text.length < aggregateBelowChars) return 'short-prompt';
    if (
      cachedShare !== undefined &&
      text !== '' &&
      cachedShare(decodeWorkers.available, input) > aggregateCachedRatio
    ) {
      return 'decode-cached';
    }
    return undefined;
  };
}
