// Scorers as registered plugins, as llm-d registers its scorers (`pkg/plugins/register.go`):
// each owns its name, its parameters (checked per plugin, in plugin-params) and the data it
// reads. The `scored` policy composes them from the settings, with the filters and picker of
// filter-plugins and picker-plugins; a new scorer is its module and one entry below.
import { describeValue } from '../util/describe-value.js';
import { type FilterSetting, filterPlugin } from './filter-plugins.js';
import { engineQueueScorer, kvPrefixScorer, kvUsageScorer } from './kv-prefix.js';
import { loraAffinityScorer } from './lora-affinity.js';
import { type PickerSetting, pickerPlugin } from './picker-plugins.js';
import { pluginNamed, type RoutingPlugin, readParams, withDefaults } from './plugin-params.js';
import type { RoutingPolicy } from './routing-policy.js';
import { loadScorer, prefixScorer, type Scorer, scoredPolicy } from './scoring.js';
import { type Consumption, mergeConsumption, type RoutingServices } from './services.js';
import { LATENCY_CONSUMES, latencyOf, sloHeadroomScorer } from './slo/slo-plugins.js';

export type { PluginParam } from './plugin-params.js';

/**
 * A scorer as a plugin: its name (what `routing.scorers` names), what it prefers (for the
 * docs), its parameters, the data it reads, and its factory, called once per pool (a scorer's
 * state, such as a prefix tree, describes one pool). `params` holds every parameter, defaults filled.
 */
export interface ScorerPlugin extends RoutingPlugin {
  create<W extends { url: string }>(params: Readonly<Record<string, number>>, services: RoutingServices<W>): Scorer<W>;
}

/**
 * One scorer of a `scored` policy as the settings give it: its plugin's name, its weight (1 by
 * default) and the parameters given (the rest at their defaults).
 *
 * @example
 * const scorers: ScorerSetting[] = [{ name: 'kv-usage', weight: 2 }, { name: 'prefix', params: { maxTreeChars: 1e6 } }];
 */
export interface ScorerSetting {
  readonly name: string;
  readonly weight?: number | undefined;
  readonly params?: Readonly<Record<string, number>> | undefined;
}

/** The service `name` needs, or a TypeError saying which setting provides it. */
function needed<T>(service: T | undefined, name: string, what: string): T {
  if (service === undefined) throw new TypeError(`The ${name} scorer reads ${what}, which this router does not have`);
  return service;
}

const ENGINE_LOAD = "the engines' load (routing.engineLoadIntervalMs, --engine-load-interval-ms)";

/** Every built-in scorer, once: the settings' choices, the help and the `scored` policy read this list. */
export const SCORERS: readonly ScorerPlugin[] = [
  {
    name: 'load',
    help: 'the fewest requests in flight from this router',
    params: [],
    consumes: {},
    create: () => loadScorer(),
  },
  {
    name: 'prefix',
    help: "the longest prefix of the prompt's text this router sent the worker before",
    params: [
      {
        name: 'maxTreeChars',
        help: 'characters of prompts remembered per worker',
        default: 8 * 1024 * 1024,
        expected: 'a positive whole number',
        valid: (value) => Number.isSafeInteger(value) && value > 0,
      },
    ],
    consumes: {},
    create: (params) => prefixScorer({ maxTreeChars: params.maxTreeChars }),
  },
  {
    name: 'kv-prefix',
    help: "the longest prefix of the prompt's tokens in the worker's KV cache, as the engines' KV events say",
    params: [
      {
        name: 'speculativeTtlMs',
        help: "how long a prompt just routed counts as held before the engine's event confirms it (0: never)",
        default: 2000,
        expected: 'a number of milliseconds, 0 or more',
        valid: (value) => Number.isFinite(value) && value >= 0,
      },
    ],
    consumes: { 'kv-index': 'required', tokens: 'optional' },
    create: (params, services) =>
      kvPrefixScorer(needed(services.kvIndex, 'kv-prefix', "the engines' KV events (--kv-events-port)"), {
        speculativeTtlMs: params.speculativeTtlMs,
      }),
  },
  {
    name: 'queue',
    help: 'the fewest requests waiting and running, as the engine reports them',
    params: [],
    consumes: { 'engine-load': 'required' },
    create: (_params, services) => engineQueueScorer(needed(services.engineLoad, 'queue', ENGINE_LOAD)),
  },
  {
    name: 'kv-usage',
    help: "the lowest KV cache usage, as the engine reports it (vLLM's kv_cache_usage_perc, SGLang's token_usage)",
    params: [],
    consumes: { 'engine-load': 'required' },
    create: (_params, services) => kvUsageScorer(needed(services.engineLoad, 'kv-usage', ENGINE_LOAD)),
  },
  {
    name: 'lora-affinity',
    help: "the worker running the request's LoRA adapter (its model), else one with room to load it (vLLM's vllm:lora_requests_info)",
    params: [],
    consumes: { 'engine-load': 'required' },
    create: (_params, services) => loraAffinityScorer(needed(services.engineLoad, 'lora-affinity', ENGINE_LOAD)),
  },
  {
    name: 'slo-headroom',
    help: "the most headroom under the request's service levels by the worker's predicted latency (learned from the requests served), else the lowest predicted latency",
    params: [],
    consumes: LATENCY_CONSUMES,
    create: (_params, services) => sloHeadroomScorer(latencyOf(services, 'slo-headroom'), services.role),
  },
];

/** Every built-in scorer's name, in the registry's order. */
export const SCORER_NAMES: readonly string[] = SCORERS.map((each) => each.name);

/** The `scored` policy's scorers when a program names none (`createPolicy('scored')`): this router's load alone. `disagg serve`'s settings default to their own (`routing.scorers`: prefix, slo-headroom, load). */
export const DEFAULT_SCORERS: readonly ScorerSetting[] = [{ name: 'load', weight: 1 }];

/**
 * The scorers of `routing.scorers` checked: a list of `{ name, weight?, params? }` entries, of
 * `name[:weight]` strings, or one such string comma-separated (a flag's form). Returns each
 * with its weight (1 by default) and the parameters given.
 *
 * @example
 * readScorers('kv-usage:2,queue'); // [{ name: 'kv-usage', weight: 2 }, { name: 'queue', weight: 1 }]
 *
 * @throws {RangeError} with one line naming the scorer and what is wrong with it (an unknown
 * name with the closest known one, an unknown parameter, a value out of its range).
 */
export function readScorers(value: unknown): ScorerSetting[] {
  const items = typeof value === 'string' ? value.split(',').filter((item) => item.trim() !== '') : value;
  if (!Array.isArray(items) || items.length === 0) {
    throw new RangeError(`must list at least one scorer (${SCORER_NAMES.join(', ')}), got ${describeValue(value)}`);
  }
  const scorers = items.map(readScorer);
  const twice = scorers.find((scorer, i) => scorers.findIndex((other) => other.name === scorer.name) !== i);
  if (twice !== undefined) throw new RangeError(`names scorer ${twice.name} twice: give it one weight`);
  return scorers;
}

function readScorer(item: unknown): ScorerSetting {
  const given =
    typeof item === 'string'
      ? (() => {
          const [name = '', weight, ...rest] = item.trim().split(':');
          if (rest.length > 0) throw new RangeError(`has ${JSON.stringify(item)}: a scorer is name or name:weight`);
          return weight === undefined ? { name } : { name, weight: weight === '' ? Number.NaN : Number(weight) };
        })()
      : item;
  if (typeof given !== 'object' || given === null || typeof (given as { name?: unknown }).name !== 'string') {
    throw new RangeError(`has ${describeValue(item)}: a scorer is { name, weight?, params? } or name:weight`);
  }
  const { name, weight, params, ...extra } = given as { name: string; weight?: unknown; params?: unknown };
  const plugin = scorerPlugin(name);
  const stray = Object.keys(extra)[0];
  if (stray !== undefined) {
    throw new RangeError(`has scorer ${name} with ${stray}: an entry takes name, weight and params`);
  }
  if (weight !== undefined && !(typeof weight === 'number' && Number.isFinite(weight) && weight > 0)) {
    throw new RangeError(`has scorer ${name} with weight ${describeValue(weight)}: it must be a number above 0`);
  }
  const checked = params === undefined ? undefined : readParams('scorer', plugin, params);
  return { name, weight: (weight as number | undefined) ?? 1, ...(checked === undefined ? {} : { params: checked }) };
}

/**
 * The plugin named `name`.
 *
 * @example
 * scorerPlugin('kv-usage').consumes; // { 'engine-load': 'required' }
 *
 * @throws {RangeError} for a name no plugin has, with the closest one as a hint.
 */
export function scorerPlugin(name: string): ScorerPlugin {
  return pluginNamed('scorer', SCORERS, name);
}

/**
 * What the scorers of `settings` read, together, with the filters and the picker given.
 *
 * @example
 * scorersConsume([{ name: 'kv-usage' }, { name: 'load' }]); // { 'engine-load': 'required' }
 */
export function scorersConsume(settings: readonly ScorerSetting[], parts: ScoredParts = {}): Consumption {
  return mergeConsumption([
    ...settings.map((setting) => scorerPlugin(setting.name).consumes),
    ...(parts.filters ?? []).map((setting) => filterPlugin(setting.name).consumes),
    ...(parts.picker === undefined ? [] : [pickerPlugin(parts.picker.name).consumes]),
  ]);
}

/** The parts of a `scored` policy besides its scorers, as the settings give them. */
export interface ScoredParts {
  /** Applied in order before scoring (`routing.filters`); none by default. */
  readonly filters?: readonly FilterSetting[] | undefined;
  /** Chooses among the scored candidates (`routing.picker`); `max-score` by default. */
  readonly picker?: PickerSetting | undefined;
}

/**
 * The `scored` policy of `settings`: each scorer made by its plugin with its parameters
 * (defaults filled), weighted, after the filters given and before the picker given, composed
 * by {@link scoredPolicy}.
 *
 * @example
 * const policy = scoredFrom([{ name: 'kv-usage', weight: 2 }, { name: 'load' }], { engineLoad: (w) => loads.get(w) }, { filters: [{ name: 'low-queue' }] });
 */
export function scoredFrom<W extends { url: string }>(
  settings: readonly ScorerSetting[],
  services: RoutingServices<W> = {},
  parts: ScoredParts = {},
): RoutingPolicy<W> {
  const { filters = [], picker } = parts;
  return scoredPolicy<W>({
    name: 'scored',
    filters: filters.map((setting) => {
      const plugin = filterPlugin(setting.name);
      return plugin.create<W>(withDefaults(plugin, setting.params), services);
    }),
    scorers: settings.map((setting) => {
      const plugin = scorerPlugin(setting.name);
      return { scorer: plugin.create<W>(withDefaults(plugin, setting.params), services), weight: setting.weight ?? 1 };
    }),
    ...(picker === undefined
      ? {}
      : {
          picker: pickerPlugin(picker.name).create<W>(withDefaults(pickerPlugin(picker.name), picker.params), services),
        }),
  });
}
