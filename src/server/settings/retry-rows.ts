// A request that failed on a worker, again elsewhere: retries before the first byte, migration after it.
import { RETRY_DEFAULTS } from './defaults.js';
import { nonNegativeInteger, nonNegativeMs, oneOf, positiveInteger, switchValue } from './parsers.js';
import { inGroup } from './setting.js';

/** The settings of `--help`'s Retries group. */
export const RETRY_ROWS = inGroup('Retries', [
  {
    key: 'retry.maxRetries',
    flag: 'retry-max-retries',
    arg: 'N',
    help: 'retries of a request that failed on a worker before its first byte',
    default: RETRY_DEFAULTS.maxRetries,
    parse: nonNegativeInteger,
  },
  {
    key: 'retry.initialBackoffMs',
    flag: 'retry-initial-backoff-ms',
    arg: 'N',
    help: 'the backoff before the first retry (doubling, with full jitter)',
    default: RETRY_DEFAULTS.initialBackoffMs,
    parse: nonNegativeMs,
  },
  {
    key: 'retry.maxBackoffMs',
    flag: 'retry-max-backoff-ms',
    arg: 'N',
    help: 'the longest backoff between retries',
    default: RETRY_DEFAULTS.maxBackoffMs,
    parse: nonNegativeMs,
  },
  {
    key: 'retry.reuseHandoff',
    flag: 'retry-reuse-handoff',
    arg: 'unreached|always',
    help: 'a failed sequential decode gets the same handoff on another decode worker: only if it was never reached (unreached: vLLM >= 0.21 frees the KV of what its decode refused), or always (vLLM < 0.21); else the request runs again from prefill',
    default: 'unreached',
    parse: oneOf(['unreached', 'always']),
  },
  {
    key: 'migration.limit',
    flag: 'migration-limit',
    arg: 'N',
    help: 'times one streamed request may move to another worker when its decode stream breaks after the first token (a reset, an error event, silence past --idle-ms, its worker taken out of rotation): the prompt and the tokens generated so far go on as one stream; 0 turns it off',
    default: 0,
    parse: nonNegativeInteger,
  },
  {
    key: 'migration.via',
    flag: 'migration-via',
    arg: 'decode|prefill',
    help: "where a migrated request's continuation computes its prompt: aggregated on a decode worker, or through a new prefill",
    default: 'decode',
    parse: oneOf(['decode', 'prefill']),
  },
  {
    key: 'migration.maxSeqLen',
    flag: 'migration-max-seq-len',
    arg: 'N',
    help: 'the longest sequence (prompt and generated tokens) migrated; longer ones fail as without migration',
    shownDefault: 'no bound',
    parse: positiveInteger,
  },
  {
    key: 'retry.disabled',
    flag: 'disable-retries',
    arg: '',
    help: 'never retry a request on another worker',
    default: false,
    boolean: true,
    parse: switchValue,
  },
]);
