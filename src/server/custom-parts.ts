import type { Engine } from '../flow/disaggregate.js';
import { POLICY_NAMES, type PolicyName, type RoutingServices } from '../routing/registry.js';
import type { RoutingPolicy } from '../routing/routing-policy.js';
import { describeValue } from '../util/describe-value.js';
import { ConfigError } from './config-error.js';
import type { Route } from './openai-format.js';

/**
 * How a pool of the proxy chooses its worker: a built-in policy by name (`--prefill-policy`),
 * or your own, as a {@link RoutingPolicy} (one pool's: a policy keeps state per pool) or a
 * function of the proxy's routing services that makes one (the KV block index the proxy
 * follows, the engines' load it scrapes), for a scorer of your own beside the proxy's.
 */
export type PolicyOption<W> = PolicyName | RoutingPolicy<W> | ((services: RoutingServices<W>) => RoutingPolicy<W>);

/** A policy of your own, made for its pool when the proxy is created. */
export type PolicyFactory<W> = (services: RoutingServices<W>) => RoutingPolicy<W>;

/**
 * An engine of your own for a leg, in place of the proxy's HTTP one or around it: called for
 * each request with the leg, the engine the proxy would call (its route's API, the worker key
 * or the client's `Authorization`, the trace headers) and the route; returns the engine to
 * call. Whatever it returns answers by the engine contract (a stream of `Annotated` items);
 * the flow's rules, deadlines, retries and clean-up apply to it as to the proxy's own. The
 * flow calls it with the endpoint each call is for (the request's; completions for a migrated
 * stream's continuation): pass it on to the proxy's engine, which then calls that endpoint.
 *
 * @example
 * // Every decode call with a field of yours, the rest as the proxy does it.
 * const engine: EngineHook = (leg, proxyEngine) =>
 *   leg === 'decode'
 *     ? (body, context, worker, endpoint) => proxyEngine({ ...body, priority: 1 }, context, worker, endpoint)
 *     : proxyEngine;
 * createHandler({ connector: 'vllm', prefill: [{ url: 'http://p0:8100' }], decode: [{ url: 'http://d0:8200' }], engine });
 */
export type EngineHook = (
  leg: 'prefill' | 'decode',
  proxyEngine: Engine<{ url: string }>,
  route: Route,
) => Engine<{ url: string }>;

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

/** The hook's engine for `leg`, checked as it is made: a hook that answers no engine is the program's mistake. */
export function hookedEngine(
  hook: EngineHook,
  leg: 'prefill' | 'decode',
  proxyEngine: Engine<{ url: string }>,
  route: Route,
): Engine<{ url: string }> {
  const engine = hook(leg, proxyEngine, route);
  if (typeof engine !== 'function') {
    throw new TypeError(
      `The engine option answered ${describeValue(engine)} for the ${leg} leg: it must answer an engine (a function)`,
    );
  }
  return engine;
}
