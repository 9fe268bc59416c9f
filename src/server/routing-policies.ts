import type { RequestBody } from '../flow/request-shaping.js';
import type { Selection, WorkerPool } from '../flow/worker-pool.js';
import type { PrefixTree } from '../routing/prefix-tree.js';
import { createPolicy } from '../routing/registry.js';
import { routingText } from '../routing/routing-input.js';
import type { PolicyName, ResolvedProxyOptions } from './options.js';

/**
 * The selection of one pool for `--prefill-policy` or `--decode-policy`: the registry's
 * plugin of that name, made for this pool alone (a cache-aware tree describes one pool's caches).
 */
export function selectionFor<W extends { url: string }>(
  name: PolicyName,
  routing: ResolvedProxyOptions['routing'],
): Selection<W> {
  return createPolicy<W>(name, routing);
}

/**
 * Conditional disaggregation, built in: the reason to serve a request on decode alone (a
 * prompt shorter than `aggregateBelowChars`; a decode worker known, by the decode pool's
 * cache-aware tree, to hold more than `aggregateCachedRatio` of it), or undefined to
 * disaggregate it. Undefined when both are off.
 */
export function conditionalAggregation<W>(
  routing: ResolvedProxyOptions['routing'],
  decodeWorkers: WorkerPool<W>,
  decodeSelection: Selection<W>,
): ((request: RequestBody) => string | undefined) | undefined {
  const { aggregateBelowChars, aggregateCachedRatio } = routing;
  const tree = aggregateCachedRatio > 0 ? treeOf(decodeSelection) : undefined;
  if (aggregateBelowChars === 0 && tree === undefined) return undefined;
  return (request) => {
    const text = routingText(request);
    if (text.length < aggregateBelowChars) return 'short-prompt';
    if (tree !== undefined && text !== '') {
      const { length } = tree.match(text, decodeWorkers.available);
      if (length / text.length > aggregateCachedRatio) return 'decode-cached';
    }
    return undefined;
  };
}

function treeOf<W>(selection: Selection<W>): PrefixTree<W> | undefined {
  return typeof selection === 'object' && 'tree' in selection ? (selection.tree as PrefixTree<W>) : undefined;
}
