// More pools, one per model (`pools:` in a settings file, `--pools` as JSON): each names the
// models its clients ask for and its own workers, and may run another engine or other policies;
// what a pool does not give comes from the top level. The top-level workers, when there are
// any, are the pool of every other model.
import { ENGINE_NAMES, type EngineName } from '../../engines/registry.js';
import { POLICY_NAMES, type PolicyName } from '../../routing/registry.js';
import { describeValue } from '../../util/describe-value.js';
import { Invalid, type Setting, withHint } from './setting.js';
import {
  type ProxyDecodeWorker,
  type ProxyPrefillWorker,
  parseDecodeWorkers,
  parsePrefillWorkers,
} from './worker-entries.js';

/**
 * One more pool of the fleet, as a program or a settings file writes it: the model names its
 * clients use (`model`: one, or a list: an embedding model beside its chat model, a model's
 * aliases), its decode workers and, for disaggregation, its prefill workers (none: every
 * request served on decode alone, as for an embedding or a small model), its engine and its
 * policies (the top level's by default).
 *
 * @example
 * const pools: ProxyPoolOption[] = [
 *   { model: 'big', prefill: ['http://p0:8100'], decode: ['http://d0:8200'] },
 *   { model: ['small', 'embed'], decode: ['http://s0:8000'] },
 * ];
 */
export interface ProxyPoolOption {
  model: string | readonly string[];
  /** Its decode workers at start; may be empty when `decodeDns` or `decodeSelector` finds them. */
  decode?: string | ReadonlyArray<string | ProxyDecodeWorker> | undefined;
  prefill?: string | ReadonlyArray<string | ProxyPrefillWorker> | undefined;
  /** Its workers found by DNS, as `discovery.prefillDns`/`decodeDns` find the top level's. */
  prefillDns?: string | undefined;
  decodeDns?: string | undefined;
  /** Its pods found by label (Kubernetes), as `discovery.prefillSelector`/`decodeSelector`, in the top level's namespace and ports. */
  prefillSelector?: string | undefined;
  decodeSelector?: string | undefined;
  connector?: EngineName | undefined;
  prefillPolicy?: PolicyName | undefined;
  decodePolicy?: PolicyName | undefined;
  /** Its own deadlines, where they differ from the top level's (`totalMs`, `idleMs`, ...). */
  deadlines?: Readonly<Record<string, number>> | undefined;
  /** Its own migration settings (`limit`, `via`, `maxSeqLen`), where they differ. */
  migration?: Readonly<Record<string, unknown>> | undefined;
  /** Its own routing parameters (`aggregateBelowChars`, `cacheThreshold`, `scorers`, ...), where they differ. */
  routing?: Readonly<Record<string, unknown>> | undefined;
}

/** A pool as the proxy builds it: its models, its workers, and what it gives of its own. */
export interface ResolvedPool {
  /** Every model name the pool serves. */
  readonly model: readonly string[];
  readonly prefill: ProxyPrefillWorker[];
  readonly decode: ProxyDecodeWorker[];
  readonly prefillDns: string | undefined;
  readonly decodeDns: string | undefined;
  readonly prefillSelector: string | undefined;
  readonly decodeSelector: string | undefined;
  readonly connector: EngineName | undefined;
  readonly prefillPolicy: PolicyName | undefined;
  readonly decodePolicy: PolicyName | undefined;
  readonly deadlines: Readonly<Record<string, number>> | undefined;
  readonly migration: Readonly<Record<string, unknown>> | undefined;
  readonly routing: Readonly<Record<string, unknown>> | undefined;
}

const FIELDS = [
  'model',
  'decode',
  'prefill',
  'prefillDns',
  'decodeDns',
  'prefillSelector',
  'decodeSelector',
  'connector',
  'prefillPolicy',
  'decodePolicy',
  'deadlines',
  'migration',
  'routing',
];

/**
 * The routing parameters that are the router's, not a pool's: the headers it reads and how
 * often it reads the engines' load.
 */
const PROCESS_WIDE = new Set(['sessionHeader', 'prefixKeyHeader', 'engineLoadIntervalMs', 'engineLoadStaleMs']);

/**
 * A pool's own settings of a group (`deadlines`, `migration`, `routing`): each key read by the
 * top-level row of the same key (one of `settings`), so that a pool's value checks as the top
 * level's does.
 */
function groupOf(
  value: unknown,
  group: 'deadlines' | 'migration' | 'routing',
  at: string,
  settings: readonly Setting[],
): Readonly<Record<string, unknown>> | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new Invalid(`has a pool (${at}) whose ${group} is ${describeValue(value)}: an object of ${group} settings`);
  }
  const rows = settings.filter(
    (setting) => setting.key.startsWith(`${group}.`) && !PROCESS_WIDE.has(setting.key.slice(group.length + 1)),
  );
  const known = rows.map((setting) => setting.key.slice(group.length + 1));
  const out: Record<string, unknown> = {};
  for (const [key, given] of Object.entries(value)) {
    const setting = rows.find((each) => each.key === `${group}.${key}`);
    if (setting === undefined) {
      throw new Invalid(
        withHint(`has a pool (${at}) with an unknown ${group} setting ${JSON.stringify(key)}`, key, known),
      );
    }
    try {
      out[key] = setting.parse(given);
    } catch (error) {
      throw new Invalid(`has a pool (${at}) whose ${group}.${key} ${(error as Error).message}`);
    }
  }
  return out;
}

/** A pool's discovery field: a non-empty string, or absent. */
function sourceOf(value: unknown, field: string, at: string): string | undefined {
  if (value === undefined) return undefined;
  if (typeof value === 'string' && value !== '') return value;
  throw new Invalid(`has a pool (${at}) whose ${field} is ${describeValue(value)}: a non-empty string`);
}

function oneOf<T extends string>(value: unknown, names: readonly T[], what: string, at: string): T | undefined {
  if (value === undefined) return undefined;
  if (typeof value === 'string' && (names as readonly string[]).includes(value)) return value as T;
  throw new Invalid(
    withHint(
      `has a pool (${at}) whose ${what} is ${describeValue(value)}: expected one of ${names.join(', ')}`,
      String(value),
      names,
    ),
  );
}

/** The models a pool names: one name or a non-empty list of them, none empty. */
function modelsOf(value: unknown, at: string): string[] {
  const list = typeof value === 'string' ? [value] : Array.isArray(value) ? value : undefined;
  if (list === undefined || list.length === 0 || !list.every((name) => typeof name === 'string' && name !== '')) {
    throw new Invalid(
      `has a pool (${at}) whose model is ${describeValue(value)}: give the model name its clients send, or a list of them`,
    );
  }
  return list as string[];
}

/**
 * The pools of a settings file's list (a flag's or variable's JSON): each checked, its workers
 * read as `--prefill`/`--decode` read theirs, its `deadlines`, `migration` and `routing` by the
 * top level's rows of the same keys among `settings` (the `pools` row hands them in, so that
 * this module needs no table of every setting, which lists it); a model named by two pools is
 * refused.
 *
 * @throws {Invalid} saying which pool and field is wrong, and what is expected.
 */
export function parsePools(value: unknown, settings: readonly Setting[]): ResolvedPool[] {
  let list = value;
  if (typeof value === 'string') {
    try {
      list = JSON.parse(value);
    } catch {
      throw new Invalid(`is not JSON: give a list of pools, [{"model": "...", "decode": ["http://..."]}]`);
    }
  }
  if (!Array.isArray(list)) throw new Invalid(`takes a list of pools, got ${describeValue(list)}`);
  const seen = new Map<string, number>();
  return list.map((entry: unknown, index): ResolvedPool => {
    const at = `#${index + 1}`;
    if (typeof entry !== 'object' || entry === null || Array.isArray(entry)) {
      throw new Invalid(`has a pool (${at}) that is not an object: ${describeValue(entry)}`);
    }
    const pool = entry as Record<string, unknown>;
    for (const field of Object.keys(pool)) {
      if (!FIELDS.includes(field))
        throw new Invalid(withHint(`has a pool (${at}) with an unknown field ${JSON.stringify(field)}`, field, FIELDS));
    }
    const models = modelsOf(pool.model, at);
    for (const model of models) {
      const other = seen.get(model);
      if (other !== undefined)
        throw new Invalid(`names the model ${JSON.stringify(model)} in two pools (#${other} and ${at})`);
      seen.set(model, index + 1);
    }
    const name = models[0] as string;
    const decode = pool.decode === undefined ? [] : parseDecodeWorkers(pool.decode);
    const decodeDns = sourceOf(pool.decodeDns, 'decodeDns', name);
    const decodeSelector = sourceOf(pool.decodeSelector, 'decodeSelector', name);
    if (decode.length === 0 && decodeDns === undefined && decodeSelector === undefined) {
      throw new Invalid(
        `has a pool (${name}) without decode workers: give it at least one (or decodeDns or decodeSelector to find them)`,
      );
    }
    return {
      model: models,
      prefill: pool.prefill === undefined ? [] : parsePrefillWorkers(pool.prefill),
      decode,
      prefillDns: sourceOf(pool.prefillDns, 'prefillDns', name),
      decodeDns,
      prefillSelector: sourceOf(pool.prefillSelector, 'prefillSelector', name),
      decodeSelector,
      connector: oneOf(pool.connector, ENGINE_NAMES, 'connector', models[0] as string),
      prefillPolicy: oneOf(pool.prefillPolicy, POLICY_NAMES, 'prefillPolicy', models[0] as string),
      decodePolicy: oneOf(pool.decodePolicy, POLICY_NAMES, 'decodePolicy', models[0] as string),
      deadlines: groupOf(pool.deadlines, 'deadlines', name, settings) as Readonly<Record<string, number>> | undefined,
      migration: groupOf(pool.migration, 'migration', name, settings),
      routing: groupOf(pool.routing, 'routing', name, settings),
    };
  });
}
