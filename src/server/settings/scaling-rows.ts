// The scaling signals: what makes a stage saturated (1.0, the set point an autoscaler holds).
import { SATURATION_DEFAULTS } from '../../scaling/stage-saturation.js';
import { oneOf, positiveInteger, positiveNumber, unitRatio } from './parsers.js';
import { Invalid, inGroup } from './setting.js';

/** A share of the KV cache above 0, up to all of it. */
function kvShare(value: unknown): number {
  const share = unitRatio(value);
  if (share === 0)
    throw new Invalid('must be above 0 (a worker is saturated when this share of its KV cache is in use)');
  return share;
}

/** The settings of `--help`'s Scaling group. */
export const SCALING_ROWS = inGroup('Scaling', [
  {
    key: 'scaling.saturationSource',
    flag: 'saturation-source',
    arg: 'auto|engine|in-flight',
    help: "what disagg_stage_saturation reads of each worker: auto, its engine's queue and KV cache where a routing policy has the router scrape them (--engine-load-interval-ms), else its requests in flight; engine, scrape them for this too; in-flight, the requests in flight alone",
    default: 'auto',
    parse: oneOf(['auto', 'engine', 'in-flight']),
  },
  {
    key: 'scaling.queueDepth',
    flag: 'saturation-queue-depth',
    arg: 'N',
    help: "requests waiting in an engine's queue that make its worker saturated (1.0), as llm-d's queueDepthThreshold",
    default: SATURATION_DEFAULTS.queueDepth,
    parse: positiveNumber,
  },
  {
    key: 'scaling.kvUsage',
    flag: 'saturation-kv-usage',
    arg: 'RATIO',
    help: "the share of an engine's KV cache in use that makes its worker saturated (1.0), as llm-d's kvCacheUtilThreshold",
    default: SATURATION_DEFAULTS.kvUsage,
    parse: kvShare,
  },
  {
    key: 'scaling.prefillRequests',
    flag: 'saturation-prefill-requests',
    arg: 'N',
    help: 'requests in flight that make a prefill worker saturated (1.0) where its engine is not read: the prompts it computes at once at the latency you want',
    default: SATURATION_DEFAULTS.prefillRequests,
    parse: positiveInteger,
  },
  {
    key: 'scaling.decodeRequests',
    flag: 'saturation-decode-requests',
    arg: 'N',
    help: "requests in flight that make a decode worker saturated (1.0) where its engine is not read: its batch at the inter-token latency you want (vLLM's --max-num-seqs at most)",
    default: SATURATION_DEFAULTS.decodeRequests,
    parse: positiveInteger,
  },
]);
