// Where the proxy listens: the API and, apart, /metrics.

import { port, text } from './parsers.js';
import { inGroup } from './setting.js';

/** The settings of `--help`'s Listening group. */
export const LISTENING_ROWS = inGroup('Listening', [
  {
    key: 'host',
    flag: 'host',
    arg: 'HOST',
    help: 'where to listen',
    default: '0.0.0.0',
    serveOnly: true,
    parse: text,
  },
  {
    key: 'port',
    flag: 'port',
    arg: 'N',
    help: 'the port to listen on',
    default: 8000,
    serveOnly: true,
    parse: port,
  },
  {
    key: 'metricsPort',
    flag: 'metrics-port',
    arg: 'N',
    help: 'serve /metrics on this port only (not on --port), for a scrape the API port does not expose',
    shownDefault: 'on --port',
    parse: port,
  },
]);
