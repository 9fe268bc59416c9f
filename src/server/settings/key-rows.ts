// Bearer keys: of clients, of the admin API, and the one sent to workers.

import { text } from './parsers.js';
import { inGroup } from './setting.js';

/** The settings of `--help`'s Keys group. */
export const KEY_ROWS = inGroup('Keys', [
  {
    key: 'apiKey',
    flag: 'api-key',
    arg: 'KEY',
    help: 'the key clients must send as a bearer token on /v1 routes (none by default)',
    shownDefault: 'none',
    parse: text,
  },
  {
    key: 'adminKey',
    flag: 'admin-key',
    arg: 'KEY',
    help: 'the bearer token of the admin API (/admin/workers: list, add, drain, remove); off without one',
    shownDefault: 'off',
    parse: text,
  },
  {
    key: 'workerApiKey',
    flag: 'worker-api-key',
    arg: 'KEY',
    help: "the bearer token sent to every worker (else the client's own Authorization)",
    shownDefault: 'none',
    parse: text,
  },
]);
