import type { Connector } from '../flow/connectors.js';
import type { EngineHandoff } from '../protocol/engines/engine-handoff.js';
import type { EngineLoadMetrics } from '../protocol/engines/load-metrics.js';
import { ENGINE_NAMES, ENGINE_WIRES, type EngineName } from '../protocol/engines/wires.js';
import { sglangBootstrap } from './sglang/connector.js';
import { SGLANG_PREFILL_WORKER_FIELDS, type WorkerFieldKind } from './sglang/worker-fields.js';
import { trtllmContextFirst } from './trtllm/connector.js';
import { vllmNixl } from './vllm/connector.js';

export { ENGINE_NAMES, type EngineName } from '../protocol/engines/wires.js';
export { sglangBootstrap } from './sglang/connector.js';
export { trtllmContextFirst } from './trtllm/connector.js';
export { RELEASE_MODEL, vllmNixl } from './vllm/connector.js';

/**
 * An engine the proxy fronts: its name (what `--connector` takes), what to call it, how a
 * request crosses from its prefill worker to its decode worker (the {@link Connector}), and
 * whether its prefill workers have a bootstrap server the decode worker connects to (SGLang:
 * the proxy names it in every request, so a prefill worker without its own port gets
 * `--bootstrap-port`).
 */
export interface EngineEntry {
  readonly name: EngineName;
  readonly title: string;
  readonly connector: Connector;
  /** Where its handoff travels on the wire (request fields, where a prefill answer puts it). */
  readonly handoff: EngineHandoff;
  readonly prefillBootstrap: boolean;
  /** The fields a prefill worker entry of this engine may have besides `url` and `name`. */
  readonly prefillWorkerFields: Readonly<Record<string, WorkerFieldKind>>;
  /** Where its `/metrics` says how loaded a worker is; undefined for an engine without them. */
  readonly loadMetrics: EngineLoadMetrics | undefined;
}

/** What an engine adds above the flow to its wire facts: its title, connector and worker fields. */
type Adapter = Pick<EngineEntry, 'title' | 'connector' | 'prefillBootstrap' | 'prefillWorkerFields'>;

// One adapter per engine of the wire list (`protocol/engines/wires.ts`, the one list of
// engines): typed by its names, so that an engine without its adapter does not compile.
const ADAPTERS: { readonly [N in EngineName]: Adapter } = {
  vllm: { title: 'vLLM with NIXL', connector: vllmNixl, prefillBootstrap: false, prefillWorkerFields: {} },
  sglang: {
    title: 'SGLang',
    connector: sglangBootstrap,
    prefillBootstrap: true,
    prefillWorkerFields: SGLANG_PREFILL_WORKER_FIELDS,
  },
  // Its load metrics are undefined: TensorRT-LLM's server metrics are not mapped here.
  trtllm: { title: 'TensorRT-LLM', connector: trtllmContextFirst, prefillBootstrap: false, prefillWorkerFields: {} },
};

/**
 * Every engine, once, in the wire list's order: its wire facts (`protocol/engines/<name>.ts`)
 * and its adapters. The settings' choices, `--help`, the proxy's connector and the worker
 * checks read it, and the fakes of `disagg/testing` must have one protocol per name (their
 * table is typed by {@link EngineName}). A new engine is its data file and entry in
 * `protocol/engines/`, a folder `engines/<name>/` (its `connector.ts` and `fake.ts`), its
 * adapter here and its fake in the fakes' table; the compiler holds the tables to the list.
 */
export const ENGINES: readonly EngineEntry[] = Object.freeze(
  ENGINE_WIRES.map(
    (wire): EngineEntry =>
      Object.freeze({ name: wire.name, handoff: wire.handoff, loadMetrics: wire.loadMetrics, ...ADAPTERS[wire.name] }),
  ),
);

/**
 * The engine of that name.
 *
 * @throws {TypeError} for a name no engine has.
 */
export function engineOf(name: EngineName): EngineEntry {
  const found = ENGINES.find((each) => each.name === name);
  if (found === undefined)
    throw new TypeError(`No engine is named ${JSON.stringify(name)}: ${ENGINE_NAMES.join(', ')}`);
  return found;
}

/** The fields a decode worker entry may have: those every worker entry may. */
export const DECODE_WORKER_FIELDS: Readonly<Record<string, WorkerFieldKind>> = Object.freeze({
  url: 'string',
  name: 'string',
  kvEvents: 'string',
  kvEventsReplay: 'string',
  labels: 'labels',
  attributes: 'labels',
});

/**
 * The fields a prefill worker entry may have, over every engine: `url`, `name`, its KV event
 * endpoints and `labels` (read into its `attributes`, which an entry read once already holds, or
 * a library user's own gives), and each engine's own (SGLang's bootstrap
 * server and DP rank). A file that names its workers as objects is checked against it.
 */
export const PREFILL_WORKER_FIELDS: Readonly<Record<string, WorkerFieldKind>> = Object.freeze(
  Object.assign({}, DECODE_WORKER_FIELDS, ...ENGINES.map((each) => each.prefillWorkerFields)),
);
