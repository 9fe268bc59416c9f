// What is let in: requests at once, the queue, tenants and their shared limits, the body size.
import { DEFAULT_MAX_BODY_BYTES } from './defaults.js';
import {
  headerName,
  keyList,
  nonNegativeInteger,
  oneOf,
  positiveInteger,
  positiveMs,
  redisUrl,
  text,
} from './parsers.js';
import { inGroup } from './setting.js';

/** The settings of `--help`'s Admission group. */
export const ADMISSION_ROWS = inGroup('Admission', [
  {
    key: 'maxConcurrentRequests',
    flag: 'max-concurrent-requests',
    arg: 'N',
    help: 'generation requests served at once (more wait in the queue)',
    default: 1024,
    parse: positiveInteger,
  },
  {
    key: 'queueSize',
    flag: 'queue-size',
    arg: 'N',
    help: 'requests that may wait for a slot (more get a 429 with Retry-After)',
    default: 1024,
    parse: nonNegativeInteger,
  },
  {
    key: 'queueTimeoutMs',
    flag: 'queue-timeout-ms',
    arg: 'N',
    help: 'how long a request may wait in the queue (then a 429)',
    default: 30_000,
    parse: positiveMs,
  },
  {
    key: 'tenantsFile',
    flag: 'tenants-file',
    arg: 'FILE',
    help: 'tenants (YAML or JSON: names, API keys, priority (below 0: sheddable), requests and tokens per minute, requests at once, service levels (slo: ttftMs, itlMs, where a request names none); the default tenant; a queue time-to-live per priority band), read again when it changes; a tenant key is an API key too',
    parse: text,
  },
  {
    key: 'tenantHeader',
    flag: 'tenant-header',
    arg: 'NAME',
    help: 'a header that a trusted gateway in front sets to the tenant of a request',
    parse: headerName,
  },
  {
    key: 'tenantHeaderKeys',
    flag: 'tenant-header-keys',
    arg: 'KEY[,KEY...]',
    help: 'the API keys whose requests may name their tenant in --tenant-header',
    shownDefault: 'any request',
    parse: keyList,
  },
  {
    key: 'redisUrl',
    flag: 'redis-url',
    arg: 'URL',
    help: "the tenants' per-minute limits in this Redis (redis://host:port/db), so that every replica of the router enforces one limit",
    shownDefault: 'in this process',
    parse: redisUrl,
  },
  {
    key: 'redisFailure',
    flag: 'redis-failure',
    arg: 'open|closed',
    help: "while Redis is unreachable: let requests in without their tenants' limits (open, logged and counted), or refuse limited tenants' requests with a 503 (closed)",
    default: 'open',
    parse: oneOf(['open', 'closed']),
  },
  {
    key: 'replicaSyncMs',
    flag: 'replica-sync-ms',
    arg: 'N',
    help: "with --redis-url: how often each replica shares its requests in flight per worker through Redis and reads the others', so that replicas balance as one (another replica's request shows within two of these; a replica silent for eight ages out)",
    default: 250,
    parse: positiveMs,
  },
  {
    key: 'maxBodyBytes',
    flag: 'max-body-bytes',
    arg: 'N',
    help: 'the largest request body accepted',
    default: DEFAULT_MAX_BODY_BYTES,
    parse: positiveInteger,
  },
  {
    key: 'maxExtProcStreams',
    flag: 'max-ext-proc-streams',
    arg: 'N',
    help: "disagg epp: Envoy ext_proc streams (requests through the gateway) open at once; past it a new stream is refused at once with gRPC RESOURCE_EXHAUSTED (counted in disagg_epp_streams_refused_total, logged at most once per 10 s), the streams open untouched. Each open stream holds about 8 KB, and its request body (at most --max-body-bytes) while that is read. The default leaves room for every request admission serves or queues, so that a busy gateway's clients meet admission's 429 first",
    shownDefault: '2 x (--max-concurrent-requests + --queue-size): 4096',
    parse: positiveInteger,
  },
]);
