// Every engine, once, by its wire facts: the one list of engines. The transport and the flow
// read the handoffs from it; `engines/registry.ts` adds each engine's adapters in a table typed
// by its names, so that the two cannot differ.
import { sglangWire } from './sglang.js';
import { trtllmWire } from './trtllm.js';
import { vllmWire } from './vllm.js';

/** Every engine's wire facts, in the registry's order. A new engine is its data file and one entry here. */
export const ENGINE_WIRES = [vllmWire, sglangWire, trtllmWire] as const;

/** The name of an engine: `vllm`, `sglang`, `trtllm`. */
export type EngineName = (typeof ENGINE_WIRES)[number]['name'];

/** Every engine's name, in the list's order. */
export const ENGINE_NAMES: readonly EngineName[] = Object.freeze(ENGINE_WIRES.map((each) => each.name));
