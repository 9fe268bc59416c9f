// When a worker is out of rotation: health probes and the circuit breaker per worker.
import { BREAKER_DEFAULTS, HEALTH_DEFAULTS } from './defaults.js';
import { positiveInteger, positiveMs } from './parsers.js';
import { inGroup } from './setting.js';

/** The settings of `--help`'s Health group. */
export const HEALTH_ROWS = inGroup('Health', [
  {
    key: 'healthIntervalMs',
    flag: 'health-interval-ms',
    arg: 'N',
    help: 'between worker health probes',
    default: HEALTH_DEFAULTS.intervalMs,
    parse: positiveMs,
  },
  {
    key: 'healthTimeoutMs',
    flag: 'health-timeout-ms',
    arg: 'N',
    help: 'how long one health probe may take before it counts as failed (a worker busy with long prompts may answer /health late)',
    default: HEALTH_DEFAULTS.timeoutMs,
    parse: positiveMs,
  },
  {
    key: 'healthFailureThreshold',
    flag: 'health-failure-threshold',
    arg: 'N',
    help: 'failed probes in a row that take a worker out (unreachable: at once)',
    default: HEALTH_DEFAULTS.failureThreshold,
    parse: positiveInteger,
  },
  {
    key: 'healthSuccessThreshold',
    flag: 'health-success-threshold',
    arg: 'N',
    help: 'successful probes in a row that bring a worker back',
    default: HEALTH_DEFAULTS.successThreshold,
    parse: positiveInteger,
  },
  {
    key: 'breaker.failureThreshold',
    flag: 'breaker-failure-threshold',
    arg: 'N',
    help: 'requests in a row failing on a worker that open its circuit (out of rotation)',
    default: BREAKER_DEFAULTS.failureThreshold,
    parse: positiveInteger,
  },
  {
    key: 'breaker.successThreshold',
    flag: 'breaker-success-threshold',
    arg: 'N',
    help: 'successes in a row on trial that close a circuit again',
    default: BREAKER_DEFAULTS.successThreshold,
    parse: positiveInteger,
  },
  {
    key: 'breaker.openMs',
    flag: 'breaker-open-ms',
    arg: 'N',
    help: 'how long an open circuit keeps its worker out before a trial',
    default: BREAKER_DEFAULTS.openMs,
    parse: positiveMs,
  },
]);
