import type { Connector } from '../flow/connectors.js';
import type { EngineHandoff } from './engine-handoff.js';
import { type EngineLoadMetrics, SGLANG_LOAD_METRICS, VLLM_LOAD_METRICS } from './load-metrics.js';
import { sglangBootstrap } from './sglang/connector.js';
import { sglangHandoff } from './sglang/handoff.js';
import { SGLANG_PREFILL_WORKER_FIELDS, type WorkerFieldKind } from './sglang/worker-fields.js';
import { trtllmContextFirst } from './trtllm/connector.js';
import { trtllmHandoff } from './trtllm/handoff.js';
import { vllmNixl } from './vllm/connector.js';
import { vllmHandoff } from './vllm/handoff.js';

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
  readonly name: string;
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

function engine<const N extends string>(entry: EngineEntry & { name: N }): EngineEntry & { name: N } {
  return Object.freeze(entry);
}

/**
 * Every engine, once: the settings' choices, `--help`, the proxy's connector and the worker
 * checks read it, and the fakes of `disagg/testing` must have one protocol per name (their
 * table is typed by {@link EngineName}). A new engine is a folder `engines/<name>/` (its
 * `connector.ts`, `handoff.ts` and `fake.ts`), an entry here, its handoff in `handoff-wire.ts`
 * and its fake in the fakes' table; test/engines/registry.test.ts holds the lists together.
 */
export const ENGINES = [
  engine({
    name: 'vllm',
    title: 'vLLM with NIXL',
    connector: vllmNixl,
    handoff: vllmHandoff,
    prefillBootstrap: false,
    prefillWorkerFields: {},
    loadMetrics: VLLM_LOAD_METRICS,
  }),
  engine({
    name: 'sglang',
    title: 'SGLang',
    connector: sglangBootstrap,
    handoff: sglangHandoff,
    prefillBootstrap: true,
    prefillWorkerFields: SGLANG_PREFILL_WORKER_FIELDS,
    loadMetrics: SGLANG_LOAD_METRICS,
  }),
  engine({
    name: 'trtllm',
    title: 'TensorRT-LLM',
    connector: trtllmContextFirst,
    handoff: trtllmHandoff,
    prefillBootstrap: false,
    prefillWorkerFields: {},
    // Not read yet: TensorRT-LLM's server metrics are not mapped here.
    loadMetrics: undefined,
  }),
] as const;

/** The name of an engine of {@link ENGINES}. */
export type EngineName = (typeof ENGINES)[number]['name'];

/** Every engine's name, in the registry's order. */
export const ENGINE_NAMES = ENGINES.map((each) => each.name) as readonly EngineName[];

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

/**
 * The fields a prefill worker entry may have, over every engine: `url` and `name`, and each
 * engine's own (SGLang's bootstrap server and DP rank). A file that names its workers as
 * objects is checked against it.
 */
export const PREFILL_WORKER_FIELDS: Readonly<Record<string, WorkerFieldKind>> = Object.freeze(
  Object.assign(
    { url: 'string', name: 'string', kvEvents: 'string', kvEventsReplay: 'string' },
    ...ENGINES.map((each) => each.prefillWorkerFields),
  ),
);

/** The fields a decode worker entry may have. */
export const DECODE_WORKER_FIELDS: Readonly<Record<string, WorkerFieldKind>> = Object.freeze({
  url: 'string',
  name: 'string',
  kvEvents: 'string',
  kvEventsReplay: 'string',
});
