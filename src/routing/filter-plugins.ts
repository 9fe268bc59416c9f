// Filters as registered plugins, as llm-d registers its filters beside its scorers: each owns its
// name, its parameters and the data it reads. The `scored` policy applies those the settings
// name (`routing.filters`, `--filters`), in order, before scoring; a new filter is its function
// and one entry below.
import { describeValue } from '../util/describe-value.js';
import type { EngineLoadSource } from './kv-prefix.js';
import { lowKvUsageFilter, lowQueueFilter } from './load-filters.js';
import { sameLabelFilter, UNPAIRED, type Unpaired } from './pairing-filters.js';
import {
  type AnyParam,
  type ParamValue,
  type PluginSetting,
  pluginNamed,
  type RoutingPlugin,
  readPluginEntry,
} from './plugin-params.js';
import type { Filter } from './scoring.js';
import type { RoutingServices } from './services.js';
import { LATENCY_CONSUMES, latencyOf, sloFeasibleFilter } from './slo/slo-plugins.js';
import { WORKER_ATTRIBUTES } from './worker-attributes.js';

/**
 * A filter as a plugin: its name (what `routing.filters` names), what it keeps (for the docs),
 * its parameters, the data it reads, and its factory, called once per pool.
 */
export interface FilterPlugin extends RoutingPlugin<AnyParam> {
  create<W extends { url: string }>(
    params: Readonly<Record<string, ParamValue>>,
    services: RoutingServices<W>,
  ): Filter<W>;
}

/**
 * One filter of a `scored` policy as the settings give it.
 *
 * @example
 * const filters: FilterSetting[] = [{ name: 'low-kv-usage', params: { maxKvUsage: 0.9 } }, { name: 'low-queue' }];
 */
export type FilterSetting = PluginSetting;

/** The engines' load, or a TypeError naming the filter and the setting that provides it. */
function engineLoad<W>(services: RoutingServices<W>, name: string): EngineLoadSource<W> {
  if (services.engineLoad === undefined) {
    throw new TypeError(
      `The ${name} filter reads the engines' load (routing.engineLoadIntervalMs, --engine-load-interval-ms), which this router does not have`,
    );
  }
  return services.engineLoad;
}

/** Every built-in filter, once: the settings' choices, the help and the `scored` policy read this list. */
export const FILTERS: readonly FilterPlugin[] = [
  {
    name: 'low-queue',
    help: 'keeps the workers whose engine reports at most maxWaiting requests waiting',
    params: [
      {
        name: 'maxWaiting',
        help: 'requests waiting in the engine past which a worker is passed over',
        // llm-d's low-queue filter's threshold.
        default: 128,
        expected: 'a whole number of 0 or more',
        valid: (value: number) => Number.isSafeInteger(value) && value >= 0,
      },
    ],
    consumes: { 'engine-load': 'required' },
    create: (params, services) => lowQueueFilter(engineLoad(services, 'low-queue'), params.maxWaiting as number),
  },
  {
    name: 'low-kv-usage',
    help: 'keeps the workers whose engine reports a KV cache usage of at most maxKvUsage',
    params: [
      {
        name: 'maxKvUsage',
        help: 'the share of its KV cache in use (0 to 1) past which a worker is passed over',
        default: 0.8,
        expected: 'a number above 0 and at most 1',
        valid: (value: number) => Number.isFinite(value) && value > 0 && value <= 1,
      },
    ],
    consumes: { 'engine-load': 'required' },
    create: (params, services) => lowKvUsageFilter(engineLoad(services, 'low-kv-usage'), params.maxKvUsage as number),
  },
  {
    name: 'same-label',
    help: "keeps the workers whose label key has the value of the earlier leg's worker (decode workers of the prefill worker's model revision)",
    params: [
      {
        kind: 'text',
        name: 'key',
        help: "the label (attribute) to pair by: a worker entry's labels, its pod's, or a well-known one",
        default: WORKER_ATTRIBUTES.revision,
        expected: 'a label key such as disagg.ai/revision',
        valid: (value: string) => value.trim() !== '',
      },
      {
        kind: 'text',
        name: 'unpaired',
        help: 'when no worker has that value: any (go on with every worker) or fail (no worker is available)',
        default: 'any',
        expected: UNPAIRED.join(' or '),
        valid: (value: string) => (UNPAIRED as readonly string[]).includes(value),
      },
    ],
    consumes: {},
    create: (params) => sameLabelFilter(params.key as string, params.unpaired as Unpaired),
  },
  {
    name: 'slo-feasible',
    help: "drops the workers predicted (from the requests served) to miss the request's service levels; keeps them all, best effort, when none would meet them",
    params: [],
    consumes: LATENCY_CONSUMES,
    create: (_params, services) => sloFeasibleFilter(latencyOf(services, 'slo-feasible'), services.role),
  },
];

/** Every built-in filter's name, in the registry's order. */
export const FILTER_NAMES: readonly string[] = FILTERS.map((each) => each.name);

/**
 * The plugin named `name`.
 *
 * @example
 * filterPlugin('low-queue').consumes; // { 'engine-load': 'required' }
 *
 * @throws {RangeError} for a name no filter has, with the closest one as a hint.
 */
export function filterPlugin(name: string): FilterPlugin {
  return pluginNamed('filter', FILTERS, name);
}

/**
 * The filters of `routing.filters` checked: a list of `{ name, params? }` entries or of names,
 * or names comma-separated (a flag's form); none is an empty list.
 *
 * @example
 * readFilters('low-queue,low-kv-usage'); // [{ name: 'low-queue' }, { name: 'low-kv-usage' }]
 *
 * @throws {RangeError} with one line naming the filter and what is wrong with it.
 */
export function readFilters(value: unknown): FilterSetting[] {
  const items = typeof value === 'string' ? value.split(',').filter((item) => item.trim() !== '') : value;
  if (!Array.isArray(items)) {
    throw new RangeError(`must list filters (${FILTER_NAMES.join(', ')}), got ${describeValue(value)}`);
  }
  const filters = items.map((item) =>
    readPluginEntry('filter', FILTERS, item, 'a filter is a name or { name, params? }'),
  );
  const twice = filters.find((filter, i) => filters.findIndex((other) => other.name === filter.name) !== i);
  if (twice !== undefined) throw new RangeError(`names filter ${twice.name} twice`);
  return filters;
}
