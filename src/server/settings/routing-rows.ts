// How a request finds its workers: policies, aggregation on decode alone, and the policies' parameters.

import { CACHE_AWARE_DEFAULTS } from '../../routing/cache-aware.js';
import { DECIDER_NAMES } from '../../routing/decider-plugins.js';
import { FILTER_NAMES } from '../../routing/filter-plugins.js';
import { DEFAULT_PICKER, PICKER_NAMES } from '../../routing/picker-plugins.js';
import { SCORER_NAMES } from '../../routing/plugins.js';

import { POLICY_NAMES } from '../../routing/registry.js';
import { DEFAULT_SESSION_HEADER } from '../../routing/session-affinity.js';
import {
  atLeastOne,
  deciderList,
  filterList,
  headerName,
  nonNegativeInteger,
  nonNegativeMs,
  oneOf,
  pickerSetting,
  positiveInteger,
  positiveMs,
  positiveNumber,
  scorerList,
  switchValue,
  unitRatio,
} from './parsers.js';
import { inGroup, row } from './setting.js';

/**
 * `disagg serve`'s scorers: the prompt's prefix where this router sent it before, the most
 * headroom under the request's service levels (else the lowest predicted latency), then load.
 * Measured against llm-d's and the others' with `npm run bench:decisions` (docs/routing.md).
 */
const SERVE_SCORERS = [
  { name: 'prefix', weight: 2 },
  { name: 'slo-headroom', weight: 2 },
  { name: 'load', weight: 1 },
];

/** The settings of `--help`'s Routing group. */
export const ROUTING_ROWS = inGroup('Routing', [
  {
    key: 'requireDisaggregation',
    flag: 'require-disaggregation',
    arg: '',
    help: 'without a prefill worker in rotation, fail /ready and answer 503 instead of serving on decode alone',
    default: false,
    boolean: true,
    parse: switchValue,
  },
  {
    key: 'selection',
    flag: 'selection',
    arg: 'least-in-flight|round-robin',
    help: 'how a worker is chosen for each leg, where --prefill-policy and --decode-policy name none (by default, scored: the SLO-aware scorers below)',
    shownDefault: 'scored',
    parse: oneOf(['least-in-flight', 'round-robin']),
  },
  ...(['prefill', 'decode'] as const).map((leg) =>
    row({
      key: `${leg}Policy` as const,
      flag: `${leg}-policy`,
      arg: POLICY_NAMES.join('|'),
      help: `how the ${leg} worker is chosen (cache-aware: where the prompt's prefix most likely is cached; session: one worker per session key)`,
      shownDefault: 'as --selection, else scored',
      parse: oneOf(POLICY_NAMES),
    }),
  ),
  {
    key: 'routing.deciders',
    flag: 'deciders',
    arg: 'NAME,...',
    help: `the P/D deciders, asked in order, the first that answers serving a request on decode alone (${DECIDER_NAMES.join(', ')}, or one a program registered); a file may give each its params, as [{ name, params }]`,
    // Measured (docs/routing.md, "Decisions under load, measured"): on Mooncake's conversation
    // trace at 2.5x, prefill-busy's count of requests took goodput from 5.35 to 6.59 req/s;
    // predicted-wait, weighing the prefill pool's predicted wait against decode's cost, to 6.90
    // and its p99 TTFT from 7.2 s to 5.7 s (it is prefill-busy until it has learnt enough).
    default: [{ name: 'predicted-wait' }],
    shownDefault: 'predicted-wait',
    parse: deciderList,
  },
  {
    key: 'routing.aggregateBelowChars',
    flag: 'aggregate-below-chars',
    arg: 'N',
    help: 'serve prompts shorter than N characters on decode alone: the short-prompt decider with belowChars N (0: never)',
    default: 0,
    parse: nonNegativeInteger,
  },
  {
    key: 'routing.aggregateCachedRatio',
    flag: 'aggregate-cached-ratio',
    arg: 'R',
    help: 'with --decode-policy cache-aware: serve on decode alone when a decode worker holds more than R of the prompt: the decode-cached decider with cachedRatio R (0: never)',
    default: 0,
    parse: unitRatio,
  },
  {
    key: 'routing.cacheThreshold',
    flag: 'cache-threshold',
    arg: 'R',
    help: 'cache-aware: the share of the prompt a worker must hold (0 to 1) for a request to go there',
    default: CACHE_AWARE_DEFAULTS.cacheThreshold,
    parse: unitRatio,
  },
  {
    key: 'routing.balanceAbsThreshold',
    flag: 'balance-abs-threshold',
    arg: 'N',
    help: 'cache-aware: requests in flight the busiest worker may have over the idlest before load wins over the cache',
    default: CACHE_AWARE_DEFAULTS.balanceAbsThreshold,
    parse: nonNegativeInteger,
  },
  {
    key: 'routing.balanceRelThreshold',
    flag: 'balance-rel-threshold',
    arg: 'R',
    help: 'cache-aware: and how many times as many (1 or more)',
    default: CACHE_AWARE_DEFAULTS.balanceRelThreshold,
    parse: atLeastOne,
  },
  {
    key: 'routing.maxTreeChars',
    flag: 'max-tree-chars',
    arg: 'N',
    help: 'cache-aware: characters of prompts remembered per worker (least recently used dropped first)',
    default: CACHE_AWARE_DEFAULTS.maxTreeChars,
    parse: positiveInteger,
  },
  {
    key: 'routing.prefixWeight',
    flag: 'prefix-weight',
    arg: 'W',
    help: 'precise-prefix: the weight of KV prefix overlap against load (whose weight is 1)',
    default: 2,
    parse: positiveNumber,
  },
  {
    key: 'routing.speculativeTtlMs',
    flag: 'speculative-ttl-ms',
    arg: 'N',
    help: "precise-prefix: how long a prompt just routed counts as held by its worker before the engine's KV event confirms it (0: never)",
    default: 2000,
    parse: nonNegativeMs,
  },
  {
    key: 'routing.scorers',
    flag: 'scorers',
    arg: 'NAME[:W],...',
    help: `scored: its scorers and their weights (${SCORER_NAMES.join(', ')}); a file may give each its params, as [{ name, weight, params }]`,
    default: SERVE_SCORERS,
    shownDefault: 'prefix:2,slo-headroom:2,load:1',
    parse: scorerList,
  },
  {
    key: 'routing.filters',
    flag: 'filters',
    arg: 'NAME,...',
    help: `scored: the filters that pass workers over before scoring (${FILTER_NAMES.join(', ')}); a file may give each its params, as [{ name, params }]`,
    default: [{ name: 'slo-feasible' }],
    shownDefault: 'slo-feasible',
    parse: filterList,
  },
  {
    key: 'routing.picker',
    flag: 'picker',
    arg: PICKER_NAMES.join('|'),
    help: 'scored: how a worker is chosen from the totals',
    default: DEFAULT_PICKER,
    shownDefault: DEFAULT_PICKER.name,
    parse: pickerSetting,
  },
  {
    key: 'routing.engineLoadIntervalMs',
    flag: 'engine-load-interval-ms',
    arg: 'N',
    help: "read each worker's own load from its /metrics (vLLM's and SGLang's queue and KV usage) this often, for precise-prefix, the queue, kv-usage and lora-affinity scorers and --saturation-source (0: off)",
    default: 0,
    parse: nonNegativeMs,
  },
  {
    key: 'routing.engineLoadStaleMs',
    flag: 'engine-load-stale-ms',
    arg: 'N',
    help: "a worker's load reading older than this counts as unknown",
    default: 2000,
    parse: positiveMs,
  },
  {
    key: 'routing.sessionHeader',
    flag: 'session-header',
    arg: 'NAME',
    help: "session: the request header with the session key (else the body's user)",
    default: DEFAULT_SESSION_HEADER,
    parse: headerName,
  },
  {
    key: 'routing.prefixKeyHeader',
    flag: 'prefix-key-header',
    arg: 'NAME',
    help: 'the request header whose value stands for the prompt in prefix routing (the body unread for it)',
    default: 'x-prefix-key',
    parse: headerName,
  },
]);
