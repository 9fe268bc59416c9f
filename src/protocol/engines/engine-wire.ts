// What one engine contributes below the transport and the flow: the facts of its wire, as data.
// Its adapters (the connector, the fake) live above the flow in `engines/<name>/` and name it.
import type { EngineHandoff } from './engine-handoff.js';
import type { EngineLoadMetrics } from './load-metrics.js';

/** One engine's wire facts: its name, where its handoff travels, where its `/metrics` says its load. */
export interface EngineWire {
  /** What `--connector` takes, and the key of the engine's adapters. */
  readonly name: string;
  /** Where its handoff travels on the wire (request fields, where a prefill answer puts it). */
  readonly handoff: EngineHandoff;
  /** Where its `/metrics` says how loaded a worker is; undefined for an engine without them. */
  readonly loadMetrics: EngineLoadMetrics | undefined;
}

/** An engine's wire facts, frozen, with its name kept as a literal type (the names' union is derived from the list). */
export function engineWire<const N extends string>(wire: EngineWire & { name: N }): EngineWire & { name: N } {
  return Object.freeze(wire);
}
