// The core both resolvers share: every row read from a source, parsed, defaulted, and the
// rules between rows that no one row can check; then the groups shaped as the options hold them.

import type { ResolvedPool } from './pool-entries.js';
import { SETTINGS } from './rows.js';
import { Problems, parseSetting, type Setting, type Source, setAt, valueAt } from './setting.js';
import type { ResolvedProxyOptions } from './types.js';

/**
 * Every setting from `read` (the first source that gives it), parsed, with defaults; a
 * required one that no source gives is refused with its command-line name.
 */
export function readSettings(
  read: (setting: Setting) => { value: unknown; source: Source } | undefined,
  problems: Problems = new Problems(),
): Record<string, unknown> {
  const values: Record<string, unknown> = { deadlines: {} };
  const refused = new Set<string>();
  for (const setting of SETTINGS) {
    const given = read(setting);
    let value: unknown;
    const before = problems.count;
    if (given !== undefined) value = problems.check(() => parseSetting(setting, given.value, given.source));
    else if (setting.default !== undefined) value = setting.default;
    else if (setting.key === 'connector')
      value = problems.check(() => parseSetting(setting, undefined, { kind: 'flag' }));
    if (problems.count > before) refused.add(setting.key);
    if (value !== undefined) setAt(values, setting.key, value);
  }
  // A worker's name is one worker, across every pool (the admin API and answers name it).
  const pools = (values.pools ?? []) as ResolvedPool[];
  const named = [values as { prefill?: unknown; decode?: unknown }, ...pools].flatMap((pool) =>
    (['prefill', 'decode'] as const).flatMap((role) =>
      ((pool[role] ?? []) as Array<{ name?: string }>).flatMap((worker) =>
        worker.name === undefined ? [] : [worker.name],
      ),
    ),
  );
  const twice = named.find((name, i) => named.indexOf(name) !== i);
  if (twice !== undefined) {
    problems.add(`Two workers are named ${JSON.stringify(twice)}: give each its own name (or none)`);
  }
  // A role needs a worker at start unless discovery will find them.
  for (const role of ['prefill', 'decode'] as const) {
    const list = (values[role] ?? []) as unknown[];
    values[role] = list;
    const found =
      valueAt(values, `discovery.${role}Dns`) ??
      valueAt(values, `discovery.${role}Selector`) ??
      (role === 'decode' ? valueAt(values, 'discovery.inferencePool') : undefined);
    // A list that was refused has said so already; with pools, the top level may have none.
    const pooled = pools.length > 0 && (role === 'prefill' || (values.prefill as unknown[]).length === 0);
    // A sidecar's prefill workers are named by each request's header.
    const named = role === 'prefill' && valueAt(values, 'sidecar.prefillFrom') === 'header';
    if (list.length === 0 && found === undefined && !refused.has(role) && !pooled && !named) {
      problems.add(
        `--${role} is required: at least one worker URL (or --${role}-dns or --${role}-selector to find them)`,
      );
    }
  }
  if (!refused.has('sidecar.prefillAllow')) sidecarRules(values, problems);
  if (
    valueAt(values, 'scaling.saturationSource') === 'engine' &&
    valueAt(values, 'routing.engineLoadIntervalMs') === 0
  ) {
    problems.add(
      '--saturation-source engine reads the engines every --engine-load-interval-ms, which is 0 (off): give it an interval, or choose auto or in-flight',
    );
  }
  if (
    valueAt(values, 'discovery.inferencePool') !== undefined &&
    valueAt(values, 'discovery.decodeSelector') !== undefined
  ) {
    problems.add(
      "--inference-pool names the decode pods by the pool's own selector: drop --decode-selector, or the pool",
    );
  }
  problems.throwIfAny();
  return values;
}

/** The sidecar's settings go together: an allow-list read only by a sidecar, a sidecar that allows something. */
function sidecarRules(values: Record<string, unknown>, problems: Problems): void {
  const fromHeader = valueAt(values, 'sidecar.prefillFrom') === 'header';
  const allowed = ((valueAt(values, 'sidecar.prefillAllow') ?? []) as unknown[]).length > 0;
  if (!fromHeader && allowed) {
    problems.add('--prefill-allow is read only with --prefill-from header (disagg sidecar): drop it, or add that');
  }
  if (!fromHeader && valueAt(values, 'sidecar.prefillMaxRetries') !== 0) {
    problems.add(
      '--prefill-max-retries is read only with --prefill-from header (disagg sidecar); a proxy retries with --retry-max-retries',
    );
  }
  const listed = (values.prefill as unknown[]).length > 0;
  const found = valueAt(values, 'discovery.prefillDns') ?? valueAt(values, 'discovery.prefillSelector');
  if (fromHeader && !allowed && !listed && found === undefined) {
    problems.add(
      '--prefill-from header needs --prefill-allow (the networks of the prefill pods, such as 10.0.0.0/8) or the prefill workers (--prefill, --prefill-selector): without them every request that names a prefill worker is refused',
    );
  }
}

/** The tokenizer group with its default thread count. */
export function tokenizerOf(values: Record<string, unknown>): ResolvedProxyOptions['tokenizer'] {
  const given = (values.tokenizer ?? {}) as Partial<ResolvedProxyOptions['tokenizer']>;
  return { dir: given.dir, threads: given.threads ?? 1 };
}

/** The KV events group, every key present. */
export function kvEventsOf(values: Record<string, unknown>): ResolvedProxyOptions['kvEvents'] {
  const kv = (values.kvEvents ?? {}) as Partial<ResolvedProxyOptions['kvEvents']>;
  return { port: kv.port, replayPort: kv.replayPort, topic: kv.topic, silenceMs: kv.silenceMs ?? 30_000 };
}

/** The discovery group, every key present. */
export function discoveryOf(values: Record<string, unknown>): ResolvedProxyOptions['discovery'] {
  const discovery = (values.discovery ?? {}) as Partial<ResolvedProxyOptions['discovery']>;
  return {
    prefillDns: discovery.prefillDns,
    decodeDns: discovery.decodeDns,
    dnsIntervalMs: discovery.dnsIntervalMs as number,
    prefillSelector: discovery.prefillSelector,
    decodeSelector: discovery.decodeSelector,
    inferencePool: discovery.inferencePool,
    namespace: discovery.namespace,
    port: discovery.port as number,
    prefillPort: discovery.prefillPort,
    decodePort: discovery.decodePort,
    bootstrapPortAnnotation: discovery.bootstrapPortAnnotation as string,
    workerPortsAnnotation: discovery.workerPortsAnnotation as string,
  };
}
