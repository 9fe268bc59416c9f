import { cacheAware } from './cache-aware.js';
import { consistentHash } from './consistent-hash.js';
import type { FilterSetting } from './filter-plugins.js';
import { precisePrefix } from './kv-prefix.js';
import { leastInFlight } from './least-in-flight.js';
import type { PickerSetting } from './picker-plugins.js';
import { DEFAULT_SCORERS, SCORER_NAMES, type ScorerSetting, scoredFrom, scorersConsume } from './plugins.js';
import { powerOfTwo } from './power-of-two.js';
import { random } from './random.js';
import { roundRobin } from './round-robin.js';
import type { RoutingPolicy } from './routing-policy.js';
import type { Consumption, RoutingServices } from './services.js';
import { sessionAffinity } from './session-affinity.js';

export type { RoutingServices } from './services.js';

/** The routing settings a policy may read (`--cache-threshold`, ...: the `routing` group). */
export interface RoutingParams {
  cacheThreshold: number;
  balanceAbsThreshold: number;
  balanceRelThreshold: number;
  maxTreeChars: number;
  /** precise-prefix: the weight of KV prefix overlap against load (1). */
  prefixWeight: number;
  /** precise-prefix: how long a prompt just routed counts as held before the engine confirms it (ms). */
  speculativeTtlMs: number;
  /** scored: its scorers and their weights ({@link DEFAULT_SCORERS} when not given). */
  scorers?: readonly ScorerSetting[] | undefined;
  /** scored: the filters applied before scoring, in order (none when not given). */
  filters?: readonly FilterSetting[] | undefined;
  /** scored: the picker among the scored workers (`max-score` when not given). */
  picker?: PickerSetting | undefined;
}

/**
 * A routing policy as a plugin: its name (what `--prefill-policy` and `--decode-policy` take),
 * what it does (for `--help` and the docs), the routing settings it reads, and its factory,
 * called once per pool (a policy's state, such as a cache-aware tree, describes one pool).
 * Modelled on llm-d's plugin registry (`pkg/plugins/register.go`): a plugin owns its name,
 * its parameters and its factory; nothing else lists them.
 */
export interface PolicyPlugin {
  readonly name: string;
  readonly help: string;
  readonly params: ReadonlyArray<keyof RoutingParams>;
  /**
   * The data it reads beyond the pool's counts (llm-d's `Consumes()`): the proxy feeds only
   * what the configured policies declare, and refuses a configuration lacking a required kind.
   */
  readonly consumes: Consumption | ((params: Partial<RoutingParams>) => Consumption);
  /** Whether its policies answer `cachedShare` (what conditional aggregation on decode asks). */
  readonly knowsCaches?: boolean;
  create<W extends { url: string }>(params: RoutingParams, services: RoutingServices<W>): RoutingPolicy<W>;
}

function plugin<const N extends string>(definition: PolicyPlugin & { name: N }): PolicyPlugin & { name: N } {
  return definition;
}

/**
 * Every built-in policy, once. The settings' choices, `PolicyName`, the help text and the
 * proxy's pools all come from this list; adding a policy is one entry here and its module.
 */
export const POLICIES = [
  plugin({
    name: 'least-in-flight',
    help: 'the worker with the fewest requests under way (ties in turn)',
    params: [],
    consumes: {},
    create: () => leastInFlight(),
  }),
  plugin({ name: 'round-robin', help: 'each worker in turn', params: [], consumes: {}, create: () => roundRobin() }),
  plugin({
    name: 'cache-aware',
    help: 'the worker whose prefix cache (as this router learnt it) holds most of the prompt, unless load is imbalanced',
    params: ['cacheThreshold', 'balanceAbsThreshold', 'balanceRelThreshold', 'maxTreeChars'],
    // Its tree of what this router sent: nothing from the engines.
    consumes: {},
    knowsCaches: true,
    create: (params) =>
      cacheAware({
        cacheThreshold: params.cacheThreshold,
        balanceAbsThreshold: params.balanceAbsThreshold,
        balanceRelThreshold: params.balanceRelThreshold,
        maxTreeChars: params.maxTreeChars,
      }),
  }),
  plugin({
    name: 'power-of-two',
    help: 'two workers at random, the less loaded wins',
    params: [],
    consumes: {},
    // The proxy's services may give a seeded source (a simulation's, a test's): repeatable draws.
    create: <W extends { url: string }>(_params: RoutingParams, services: RoutingServices<W>) =>
      powerOfTwo<W>({ random: services.random }),
  }),
  plugin({
    name: 'session',
    help: "a session (--session-header, else the body's user) stays on one worker (rendezvous hashing); least in flight without one",
    params: [],
    consumes: {},
    create: <W extends { url: string }>(_params: RoutingParams, services: RoutingServices<W>) =>
      sessionAffinity<W>(services.sessionBindings === undefined ? {} : { bindings: services.sessionBindings }),
  }),
  plugin({
    name: 'random',
    help: 'a worker at random',
    params: [],
    consumes: {},
    create: <W extends { url: string }>(_params: RoutingParams, services: RoutingServices<W>) =>
      random<W>({ random: services.random }),
  }),
  plugin({
    name: 'precise-prefix',
    help: "the worker whose KV cache holds most of the prompt, as the engines' own KV events say (--kv-events-port), weighed against load; token-id prompts",
    params: ['prefixWeight', 'speculativeTtlMs'],
    // Token-id prompts match without the tokenizer; the engines' load is scored when scraped.
    consumes: { 'kv-index': 'required', tokens: 'optional', 'engine-load': 'optional' },
    knowsCaches: true,
    create: <W extends { url: string }>(params: RoutingParams, services: RoutingServices<W>) => {
      if (services.kvIndex === undefined) {
        throw new TypeError(
          "precise-prefix routes on the engines' KV events: set --kv-events-port (or kvEvents endpoints on the workers)",
        );
      }
      return precisePrefix(services.kvIndex, {
        prefixWeight: params.prefixWeight,
        speculativeTtlMs: params.speculativeTtlMs,
        ...(services.engineLoad === undefined ? {} : { engineLoad: services.engineLoad }),
      });
    },
  }),
  plugin({
    name: 'consistent-hash',
    help: "a hash ring on the session key, else the prompt's start: the same worker on every router replica, ~1/n of keys move when a worker comes or goes",
    params: [],
    consumes: {},
    create: () => consistentHash(),
  }),
  plugin({
    name: 'scored',
    help: `weighted scorers from --scorers (routing.scorers: ${SCORER_NAMES.join(', ')}) after the --filters, the --picker choosing (the highest total by default, ties to the less loaded)`,
    params: ['scorers', 'filters', 'picker'],
    // What its scorers, filters and picker read, as each plugin declares it.
    consumes: (params) => scorersConsume(params.scorers ?? DEFAULT_SCORERS, params),
    create: (params, services) => scoredFrom(params.scorers ?? DEFAULT_SCORERS, services, params),
  }),
] as const;

/** The name of a built-in policy. */
export type PolicyName = (typeof POLICIES)[number]['name'];

/** Every built-in policy's name, in the registry's order. */
export const POLICY_NAMES = POLICIES.map((each) => each.name) as readonly PolicyName[];

/**
 * What the policy `name` reads with these settings (its plugin's declaration).
 *
 * @example
 * policyConsumes('precise-prefix')['kv-index']; // 'required'
 * policyConsumes('scored', { scorers: [{ name: 'kv-usage' }] })['engine-load']; // 'required'
 */
export function policyConsumes(name: PolicyName, params: Partial<RoutingParams> = {}): Consumption {
  const found = POLICIES.find((each) => each.name === name) as PolicyPlugin | undefined;
  const consumes = found?.consumes ?? {};
  return typeof consumes === 'function' ? consumes(params) : consumes;
}

/** The policies that answer `cachedShare` (they know what a worker's cache holds). */
export const CACHE_KNOWING_POLICIES = POLICIES.filter((each: PolicyPlugin) => each.knowsCaches === true).map(
  (each) => each.name,
) as readonly PolicyName[];

/**
 * A pool's policy by name, made with the routing settings it reads.
 *
 * @throws {TypeError} for a name no plugin has.
 */
export function createPolicy<W extends { url: string }>(
  name: PolicyName,
  params: RoutingParams,
  services: RoutingServices<W> = {},
): RoutingPolicy<W> {
  const found = POLICIES.find((each) => each.name === name);
  if (found === undefined)
    throw new TypeError(`No routing policy is named ${JSON.stringify(name)}: ${POLICY_NAMES.join(', ')}`);
  return found.create<W>(params, services);
}
