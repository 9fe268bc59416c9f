// `createProxy`'s and `createHandler`'s options: the rows, the program-only options, and the
// rules between settings that need more than one row (policies and what they route on).
import type { Deadlines } from '../../flow/deadlines.js';
import { DEFAULT_CLEANUP_BUDGET_MS } from '../../flow/decode-leg.js';
import { POLICY_NAMES, type PolicyName } from '../../routing/registry.js';
import type { RoutingPolicy } from '../../routing/routing-policy.js';
import { describeValue } from '../../util/describe-value.js';
import { checkConsumption } from './consumption.js';
import type { HandlerOptions, ProxyOptions } from './proxy-options.js';
import { discoveryOf, kvEventsOf, readSettings, tokenizerOf } from './read-settings.js';
import { PROGRAM_ONLY, SETTINGS } from './rows.js';
import { ConfigError, Problems, rejectUnknown, type Source, valueAt } from './setting.js';
import type { EngineHook, PolicyFactory, ResolvedProxyOptions } from './types.js';
import type { ProxyDecodeWorker, ProxyPrefillWorker } from './worker-entries.js';
import { withWorkers } from './workers.js';

/**
 * Checks `createProxy`'s options and applies every default.
 *
 * @throws {ConfigError} naming the option that is missing or wrong, or unknown.
 */
export function resolveProxyOptions(options: ProxyOptions): ResolvedProxyOptions {
  if (typeof options !== 'object' || options === null) {
    throw new ConfigError(`createProxy expects an options object, got ${describeValue(options)}`);
  }
  const known = [...SETTINGS.filter((setting) => !setting.serveOnly).map((setting) => setting.key), ...PROGRAM_ONLY];
  const problems = new Problems();
  // Policies of your own are programs, not settings: the table reads names only.
  const customPolicies = {
    prefill: problems.check(() => customPolicy<ProxyPrefillWorker>('prefill', options.prefillPolicy)),
    decode: problems.check(() => customPolicy<ProxyDecodeWorker>('decode', options.decodePolicy)),
  };
  const engine = problems.check(() => engineHook(options.engine));
  rejectUnknown(
    options as unknown as Record<string, unknown>,
    known,
    (key) => `option ${key} of createProxy`,
    problems,
  );
  const source: Source = { kind: 'option' };
  const values = readSettings((setting) => {
    if (setting.serveOnly) return undefined;
    const value = valueAt(options as unknown as Record<string, unknown>, setting.key);
    // A policy that is no name was checked above (a policy of your own, or its problem).
    if ((setting.key === 'prefillPolicy' || setting.key === 'decodePolicy') && typeof value !== 'string') {
      return undefined;
    }
    return value === undefined ? undefined : { value, source };
  }, problems);
  if (options.tracer !== undefined && typeof (options.tracer as { startSpan?: unknown })?.startSpan !== 'function') {
    throw new ConfigError(`tracer must be an OpenTelemetry tracer, got ${describeValue(options.tracer)}`);
  }
  const registry = options.metricsRegistry as { registerMetric?: unknown } | undefined;
  if (registry !== undefined && typeof registry?.registerMetric !== 'function') {
    throw new ConfigError(`metricsRegistry must be a prom-client Registry, got ${describeValue(registry)}`);
  }
  if (options.dnsLookup !== undefined && typeof options.dnsLookup !== 'function') {
    throw new ConfigError(`dnsLookup must be a function, got ${describeValue(options.dnsLookup)}`);
  }
  for (const key of ['logger', 'onEvent'] as const) {
    const value = options[key];
    if (value !== undefined && typeof value !== (key === 'onEvent' ? 'function' : 'object')) {
      throw new ConfigError(
        `${key} must be ${key === 'onEvent' ? 'a function' : 'a pino logger'}, got ${describeValue(value)}`,
      );
    }
  }
  // Without a policy named for a leg or --selection for both: the SLO-aware scored policy.
  const decodePolicy = (values.decodePolicy ?? values.selection ?? 'scored') as PolicyName;
  const prefillPolicy = (values.prefillPolicy ?? values.selection ?? 'scored') as PolicyName;
  const kv = kvEventsOf(values);
  checkConsumption(values, { prefill: prefillPolicy, decode: decodePolicy }, customPolicies, kv);
  return {
    ...(withWorkers(values) as Omit<ResolvedProxyOptions, 'logger' | 'onEvent' | 'dispatcher' | 'cleanupBudgetMs'>),
    deadlines: activeDeadlines(values.deadlines as Deadlines | undefined),
    prefillPolicy,
    decodePolicy,
    customPolicies,
    engine,
    cleanupBudgetMs: (values.cleanupBudgetMs as number | undefined) ?? DEFAULT_CLEANUP_BUDGET_MS,
    apiKey: values.apiKey as string | undefined,
    adminKey: values.adminKey as string | undefined,
    tenantsFile: values.tenantsFile as string | undefined,
    tenantHeader: values.tenantHeader as string | undefined,
    tenantHeaderKeys: values.tenantHeaderKeys as string[] | undefined,
    redisUrl: values.redisUrl as string | undefined,
    maxExtProcStreams: values.maxExtProcStreams as number | undefined,
    metricsPort: values.metricsPort as number | undefined,
    discovery: discoveryOf(values),
    kvEvents: kv,
    tokenizer: tokenizerOf(values),
    dnsLookup: options.dnsLookup,
    kubeConfig: options.kubeConfig,
    metricsRegistry: options.metricsRegistry,
    tracer: options.tracer,
    workerApiKey: values.workerApiKey as string | undefined,
    logger: options.logger,
    onEvent: options.onEvent,
    dispatcher: options.dispatcher,
  };
}

/**
 * `createHandler`'s options checked: the proxy's (as {@link resolveProxyOptions}) and the
 * base path.
 *
 * @throws {ConfigError} naming what is wrong.
 */
export function resolveHandlerOptions(options: HandlerOptions): { proxy: ResolvedProxyOptions; basePath: string } {
  if (typeof options !== 'object' || options === null) {
    throw new ConfigError(`createHandler expects an options object, got ${describeValue(options)}`);
  }
  const { basePath = '', ...proxy } = options;
  if (typeof basePath !== 'string' || (basePath !== '' && (!basePath.startsWith('/') || basePath.endsWith('/')))) {
    throw new ConfigError(
      `basePath must be a path that starts with / and does not end with one, such as '/llm', got ${describeValue(basePath)}`,
    );
  }
  return { proxy: resolveProxyOptions(proxy), basePath };
}

/** The deadlines the flow gets: the settings, each one given (`0` turns one off there). */
function activeDeadlines(deadlines: Deadlines | undefined): Deadlines {
  return { ...(deadlines ?? {}) };
}

/**
 * The policy of your own given for `role`, as a factory, or undefined for a name (the settings
 * table checks names).
 *
 * @throws {ConfigError} for something that is neither a name, a policy nor a function.
 */
export function customPolicy<W>(role: 'prefill' | 'decode', given: unknown): PolicyFactory<W> | undefined {
  if (given === undefined || typeof given === 'string') return undefined;
  if (typeof given === 'function') return given as PolicyFactory<W>;
  if (typeof given === 'object' && given !== null && typeof (given as RoutingPolicy<W>).select === 'function') {
    return () => given as RoutingPolicy<W>;
  }
  throw new ConfigError(
    `${role}Policy must be one of ${POLICY_NAMES.join(', ')}, a routing policy (an object with select()) or a function making one, got ${describeValue(given)}`,
  );
}

/**
 * The engine hook given, checked.
 *
 * @throws {ConfigError} for something that is not a function.
 */
export function engineHook(given: unknown): EngineHook | undefined {
  if (given === undefined) return undefined;
  if (typeof given !== 'function') {
    throw new ConfigError(`engine must be a function (leg, proxyEngine, route) => engine, got ${describeValue(given)}`);
  }
  return given as EngineHook;
}
