import type { Selection } from '../flow/worker-pool.js';
import { cacheAware } from '../routing/cache-aware.js';
import { powerOfTwo } from '../routing/power-of-two.js';
import { sessionAffinity } from '../routing/session-affinity.js';
import type { PolicyName, ResolvedProxyOptions } from './options.js';

/**
 * The selection of one pool for `--prefill-policy` or `--decode-policy`: a policy object of
 * its own for each pool (a cache-aware tree describes one pool's caches). `session` falls
 * back to least in flight for a request without a session key.
 */
export function selectionFor<W extends { url: string }>(
  name: PolicyName,
  routing: ResolvedProxyOptions['routing'],
): Selection<W> {
  switch (name) {
    case 'cache-aware':
      return cacheAware<W>({
        cacheThreshold: routing.cacheThreshold,
        balanceAbsThreshold: routing.balanceAbsThreshold,
        balanceRelThreshold: routing.balanceRelThreshold,
        maxTreeChars: routing.maxTreeChars,
      });
    case 'power-of-two':
      return powerOfTwo<W>();
    case 'session':
      return sessionAffinity<W>();
    default:
      return name;
  }
}
