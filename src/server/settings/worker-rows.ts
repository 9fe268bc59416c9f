// The workers at start: the engine, the two lists, SGLang's bootstrap port.
import { ENGINE_NAMES, ENGINES } from '../../engines/registry.js';
import { DEADLINE_ROWS } from './deadline-rows.js';
import { oneOf, port } from './parsers.js';
import { parsePools } from './pool-entries.js';
import { RETRY_ROWS } from './retry-rows.js';
import { parseRewrites } from './rewrite-entries.js';
import { ROUTING_ROWS } from './routing-rows.js';
import { inGroup, type Setting } from './setting.js';
import { parseDecodeWorkers, parsePrefillWorkers } from './worker-entries.js';

/**
 * The rows that read a pool's own `deadlines`, `migration` and `routing` (each key as the top
 * level's row of the same key): handed to {@link parsePools} by the `pools` row, not read from
 * rows.ts's table of every setting, which imports this module.
 */
export const POOL_GROUP_ROWS: readonly Setting[] = [...DEADLINE_ROWS, ...RETRY_ROWS, ...ROUTING_ROWS];

/** The settings of `--help`'s Workers group. */
export const WORKER_ROWS = inGroup('Workers', [
  {
    key: 'connector',
    flag: 'connector',
    arg: ENGINE_NAMES.join('|'),
    help: `the workers' engine (${ENGINES.slice(0, -1)
      .map((each) => each.title)
      .join(', ')}, or ${ENGINES.at(-1)?.title})`,
    parse: oneOf(ENGINE_NAMES),
  },
  {
    key: 'prefill',
    flag: 'prefill',
    arg: 'URL[,URL...]',
    help: 'prefill workers (repeatable)',
    multiple: true,
    parse: parsePrefillWorkers,
  },
  {
    key: 'decode',
    flag: 'decode',
    arg: 'URL[,URL...]',
    help: 'decode workers (repeatable)',
    multiple: true,
    parse: parseDecodeWorkers,
  },
  {
    key: 'pools',
    flag: 'pools',
    arg: 'JSON',
    help: 'more pools, one per model: [{ model, decode, prefill?, decodeDns?, decodeSelector?, prefillDns?, prefillSelector?, connector?, prefillPolicy?, decodePolicy? }] (a file gives a list); the top-level workers serve every other model',
    default: [],
    shownDefault: 'none',
    parse: (value: unknown) => parsePools(value, POOL_GROUP_ROWS),
  },
  {
    key: 'rewrites',
    flag: 'rewrites',
    arg: 'JSON',
    help: 'models served as weighted targets (canaries): [{ model, targets: [{ model, weight }] }] (a file gives a list); a session stays on one target',
    default: [],
    shownDefault: 'none',
    parse: parseRewrites,
  },
  {
    key: 'bootstrapPort',
    flag: 'bootstrap-port',
    arg: 'N',
    help: "SGLang: the prefill workers' bootstrap port",
    default: 8998,
    parse: port,
  },
]);
