// How the listener ends and what it allows clients' connections: drain, grace, Node's server timeouts.

import { nonNegativeMs, positiveMs } from './parsers.js';
import { inGroup } from './setting.js';

/** The settings of `--help`'s Shutdown and connections group. */
export const CONNECTION_ROWS = inGroup('Shutdown and connections', [
  {
    key: 'drainDelayMs',
    flag: 'drain-delay-ms',
    arg: 'N',
    help: 'on SIGTERM, time /ready fails while requests are still accepted',
    default: 5000,
    parse: nonNegativeMs,
  },
  {
    key: 'gracePeriodMs',
    flag: 'grace-period-ms',
    arg: 'N',
    help: 'on SIGTERM, time for requests under way',
    default: 30_000,
    parse: nonNegativeMs,
  },
  {
    key: 'keepAliveTimeoutMs',
    flag: 'keep-alive-timeout-ms',
    arg: 'N',
    help: 'how long idle client connections stay open',
    default: 72_000,
    parse: positiveMs,
  },
  {
    key: 'headersTimeoutMs',
    flag: 'headers-timeout-ms',
    arg: 'N',
    help: "how long a client may take to send a request's headers",
    default: 10_000,
    parse: positiveMs,
  },
  {
    key: 'requestTimeoutMs',
    flag: 'request-timeout-ms',
    arg: 'N',
    help: 'how long a client may take to send a whole request',
    default: 120_000,
    parse: positiveMs,
  },
]);
