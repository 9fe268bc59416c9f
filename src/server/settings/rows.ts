// The one registry of settings: every group's rows, in `--help`'s order. A new setting is a row
// in its group's file; flags, variables, file keys, `--help` and both resolvers follow from it.
import { ADMISSION_ROWS } from './admission-rows.js';
import { CONNECTION_ROWS } from './connection-rows.js';
import { DEADLINE_ROWS } from './deadline-rows.js';
import { DISCOVERY_ROWS } from './discovery-rows.js';
import { HEALTH_ROWS } from './health-rows.js';
import { KEY_ROWS } from './key-rows.js';
import { KV_EVENT_ROWS } from './kv-event-rows.js';
import { LISTENING_ROWS } from './listening-rows.js';
import { LOG_ROWS } from './log-rows.js';
import type { ProxyOptions } from './proxy-options.js';
import { RESPONSES_ROWS } from './responses-rows.js';
import { RETRY_ROWS } from './retry-rows.js';
import { ROUTING_ROWS } from './routing-rows.js';
import { SCALING_ROWS } from './scaling-rows.js';
import type { Setting } from './setting.js';
import { SIDECAR_ROWS } from './sidecar-rows.js';
import type { ResolvedProxyOptions, ServeConfig } from './types.js';
import { WORKER_ROWS } from './worker-rows.js';

/** The rows of {@link SETTINGS}, their keys as literals. */
const SETTING_ROWS = [
  ...WORKER_ROWS,
  ...LISTENING_ROWS,
  ...ROUTING_ROWS,
  ...DEADLINE_ROWS,
  ...HEALTH_ROWS,
  ...RETRY_ROWS,
  ...ADMISSION_ROWS,
  ...CONNECTION_ROWS,
  ...KEY_ROWS,
  ...KV_EVENT_ROWS,
  ...DISCOVERY_ROWS,
  ...SIDECAR_ROWS,
  ...SCALING_ROWS,
  ...RESPONSES_ROWS,
  ...LOG_ROWS,
] as const;

/**
 * Every setting of the proxy, once. `createProxy` checks its options against it, `disagg
 * serve` reads flags, `DISAGG_*` variables and config files by it, and `--help` is written
 * from it.
 */
export const SETTINGS: readonly Setting[] = SETTING_ROWS;

/** Options of `createProxy` that only a program can give (objects, functions): no row. */
export const PROGRAM_ONLY = [
  'logger',
  'onEvent',
  'dispatcher',
  'dnsLookup',
  'kubeConfig',
  'metricsRegistry',
  'tracer',
  'engine',
] as const;

// The rows and the types they fill are held together by the compiler: a row without its
// option (or its field of `disagg serve`'s config), or an option without its row, does not
// build (an `Expect` below fails).
type RowKey = (typeof SETTING_ROWS)[number]['key'];
type ServeOnlyKey = Extract<(typeof SETTING_ROWS)[number], { serveOnly: true }>['key'];
type Head<K> = K extends `${infer H}.${string}` ? H : K;
type Below<K, G extends string> = K extends `${G}.${infer Rest}` ? Rest : never;
type Same<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false;
type Expect<T extends true> = T;
type ProgramOnly = (typeof PROGRAM_ONLY)[number];
type NestedOf<G extends keyof ProxyOptions & string> = Same<Below<RowKey, G>, keyof NonNullable<ProxyOptions[G]>>;
// Values too: what a row's `parse` returns must fit the type at its key, so that a row and its
// option cannot disagree on what the value is (a choice added to one and not the other, say).
type Row = (typeof SETTING_ROWS)[number];
type ProxyRow = Exclude<Row, { serveOnly: true }>;
type ValueAt<T, K extends string> = K extends `${infer H}.${infer Rest}`
  ? ValueAt<NonNullable<T[H & keyof T]>, Rest>
  : T[K & keyof T];
type Parsed<R> = R extends { parse: (value: unknown) => infer V } ? V : never;
/** Keys whose row parses a value that the type at the key does not take. */
type Misfits<T, R> = R extends { key: infer K extends string }
  ? [Parsed<R>] extends [ValueAt<T, K>]
    ? never
    : K
  : never;
/** Keys whose type takes more than the row parses. */
type Wider<T, R> = R extends { key: infer K extends string }
  ? Same<Parsed<R>, NonNullable<ValueAt<T, K>>> extends true
    ? never
    : K
  : never;
/** Keys with a default whose resolved type still allows undefined. */
type DefaultedButOptional<T, R> = R extends { key: infer K extends string; default: NonNullable<unknown> }
  ? undefined extends ValueAt<T, K>
    ? K
    : never
  : never;
/** Keys without a default whose resolved type does not allow undefined. */
type UndefaultedButRequired<T, R> = R extends { key: infer K extends string }
  ? R extends { default: NonNullable<unknown> }
    ? never
    : undefined extends ValueAt<T, K>
      ? never
      : K
  : never;
/** Settings refused when no source gives them, rather than defaulted. */
type RequiredKey = 'connector' | 'prefill' | 'decode';
/** One type for every phase's budget, shared with the flow, which has its own defaults too. */
type DeadlineKey = Extract<Row['key'], `deadlines.${string}`>;

/** @internal Compile-time only: see above. */
export type SettingRowsMatch = [
  Expect<Same<Head<Exclude<RowKey, ServeOnlyKey>>, Exclude<keyof ProxyOptions, ProgramOnly>>>,
  Expect<Same<Head<RowKey>, keyof ServeConfig>>,
  Expect<NestedOf<'discovery'>>,
  Expect<NestedOf<'routing'>>,
  Expect<NestedOf<'retry'>>,
  Expect<NestedOf<'breaker'>>,
  Expect<NestedOf<'deadlines'>>,
  Expect<NestedOf<'kvEvents'>>,
  Expect<NestedOf<'tokenizer'>>,
  Expect<NestedOf<'migration'>>,
  Expect<NestedOf<'sidecar'>>,
  Expect<NestedOf<'scaling'>>,
  Expect<NestedOf<'responses'>>,
  Expect<Same<Misfits<ProxyOptions, ProxyRow>, never>>,
  Expect<Same<Misfits<ServeConfig, Row>, never>>,
  Expect<Same<Misfits<ResolvedProxyOptions, ProxyRow>, never>>,
  // A program may give more than a source can: read-only lists, policies of its own.
  Expect<
    Same<Wider<ProxyOptions, ProxyRow>, 'prefill' | 'decode' | 'pools' | 'rewrites' | 'prefillPolicy' | 'decodePolicy'>
  >,
  // ServeConfig is public and says `string`, though the row takes pino's levels only.
  Expect<Same<Wider<ServeConfig, Row>, 'logLevel'>>,
  Expect<Same<DefaultedButOptional<ServeConfig, Row>, DeadlineKey>>,
  Expect<Same<UndefaultedButRequired<ServeConfig, Row>, RequiredKey>>,
  Expect<Same<DefaultedButOptional<ResolvedProxyOptions, ProxyRow>, DeadlineKey>>,
  // Resolved by resolveProxyOptions itself: the flow's clean-up budget, the policies as `selection`.
  Expect<
    Same<
      UndefaultedButRequired<ResolvedProxyOptions, ProxyRow>,
      RequiredKey | 'cleanupBudgetMs' | 'prefillPolicy' | 'decodePolicy'
    >
  >,
];
