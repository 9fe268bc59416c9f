// What routing plugins read beyond a pool's own counts, and how they declare it: the proxy
// feeds a kind of data only when a configured plugin declares it (llm-d's `Consumes()`).
import type { EngineLoadSource, KvIndexSource } from './kv-prefix.js';
import type { SessionBindingView } from './session-bindings.js';
import type { LatencyPredictor, LatencyRole } from './slo/latency-predictor.js';

/**
 * The data a routing plugin may read besides the pool's requests in flight and the request's
 * routing text: `kv-index`, the engines' KV blocks from their events; `tokens`, the prompt's
 * token ids (the router tokenizes text and chat prompts for it); `engine-load`, the engines'
 * own queue and KV usage from their `/metrics`; `latency`, each worker's predicted latency,
 * learned from the requests the router serves (the proxy feeds it their timings).
 */
export type RoutingData = 'kv-index' | 'tokens' | 'engine-load' | 'latency';

/** Every kind of {@link RoutingData}, in a fixed order (for messages and loops). */
export const ROUTING_DATA: readonly RoutingData[] = ['kv-index', 'tokens', 'engine-load', 'latency'];

/**
 * What a plugin reads, by kind: `required`, it cannot route without it (the settings refuse a
 * configuration that does not provide it); `optional`, it uses it when the proxy has it.
 *
 * @example
 * const consumes: Consumption = { 'kv-index': 'required', tokens: 'optional' };
 */
export type Consumption = Partial<Readonly<Record<RoutingData, 'required' | 'optional'>>>;

/**
 * The consumption of several plugins as one: a kind required by any is required, else
 * optional if any reads it.
 *
 * @example
 * mergeConsumption([{ tokens: 'optional' }, { tokens: 'required' }]); // { tokens: 'required' }
 */
export function mergeConsumption(each: readonly Consumption[]): Consumption {
  const merged: Partial<Record<RoutingData, 'required' | 'optional'>> = {};
  for (const consumption of each) {
    for (const data of ROUTING_DATA) {
      const need = consumption[data];
      if (need === 'required' || (need === 'optional' && merged[data] === undefined)) merged[data] = need;
    }
  }
  return merged;
}

/**
 * What the proxy gives a policy besides settings, each only when a configured plugin declares
 * it: the engines' KV block index, once it has one, and their load.
 */
export interface RoutingServices<W> {
  kvIndex?: KvIndexSource<W> | undefined;
  /** The engines' own load from their `/metrics`, when the proxy scrapes it. */
  engineLoad?: EngineLoadSource<W> | undefined;
  /**
   * Each worker's predicted TTFT and inter-token time, learned online from the requests served
   * (`slo-headroom`, `slo-feasible`); one for the whole router, fed by the proxy.
   */
  latency?: LatencyPredictor<W & { url: string }> | undefined;
  /**
   * Which leg the pool these services are given to serves (`prefill` or `decode`), where the
   * proxy built it; undefined for a pool built without (a router's own): one serving whole requests.
   */
  role?: LatencyRole | undefined;
  /** The pool side's session bindings shared by the replicas (`session` keeps a session on its bound worker). */
  sessionBindings?: SessionBindingView<W> | undefined;
  /**
   * Where a plugin that chooses at random (the `weighted-random` picker) draws its numbers in
   * [0, 1): `Math.random` by default; a seeded source makes its choices repeatable (tests).
   */
  random?: (() => number) | undefined;
}
