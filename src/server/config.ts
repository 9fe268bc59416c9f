import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { parse as parseYaml } from 'yaml';
import { checkDeadlines, type Deadlines } from '../flow/deadlines.js';
import { describeValue } from '../util/describe-value.js';
import type { ProxyDecodeWorker, ProxyPrefillWorker } from './proxy.js';

/** Everything `disagg serve` needs. */
export interface ServeConfig {
  connector: 'vllm' | 'sglang';
  prefill: ProxyPrefillWorker[];
  decode: ProxyDecodeWorker[];
  host: string;
  port: number;
  selection: 'round-robin' | 'least-in-flight';
  deadlines: Deadlines;
  cleanupBudgetMs: number | undefined;
  healthIntervalMs: number;
  slowClientTimeoutMs: number;
  gracePeriodMs: number;
  keepAliveTimeoutMs: number;
  maxBodyBytes: number;
  logLevel: string;
}

/** A configuration that cannot be used; the message says which setting and what was expected. */
export class ConfigError extends Error {
  override readonly name = 'ConfigError';
}

const OPTIONS = {
  config: { type: 'string' },
  connector: { type: 'string' },
  prefill: { type: 'string', multiple: true },
  decode: { type: 'string', multiple: true },
  host: { type: 'string' },
  port: { type: 'string' },
  'bootstrap-port': { type: 'string' },
  selection: { type: 'string' },
  'cleanup-budget-ms': { type: 'string' },
  'health-interval-ms': { type: 'string' },
  'slow-client-timeout-ms': { type: 'string' },
  'grace-period-ms': { type: 'string' },
  'keep-alive-timeout-ms': { type: 'string' },
  'max-body-bytes': { type: 'string' },
  'log-level': { type: 'string' },
  'deadline-total-ms': { type: 'string' },
  'deadline-prefill-first-output-ms': { type: 'string' },
  'deadline-handoff-ms': { type: 'string' },
  'deadline-decode-first-token-ms': { type: 'string' },
  'deadline-idle-ms': { type: 'string' },
  help: { type: 'boolean', short: 'h' },
} as const;

/** The help text of `disagg serve`. */
export const SERVE_USAGE = `Usage: disagg serve --connector vllm|sglang --prefill URL[,URL...] --decode URL[,URL...] [options]

An OpenAI-compatible proxy in front of prefill and decode workers.

Options (each also DISAGG_<NAME> in the environment, e.g. DISAGG_PREFILL; a config file
given with --config or DISAGG_CONFIG, JSON or YAML, holds the same settings in camelCase):
  --connector vllm|sglang          the workers' engine (vLLM with NIXL, or SGLang)
  --prefill URL[,URL...]           prefill workers (repeatable)
  --decode URL[,URL...]            decode workers (repeatable)
  --bootstrap-port N               SGLang: the prefill workers' bootstrap port (default 8998)
  --host HOST                      where to listen (default 0.0.0.0)
  --port N                         (default 8000)
  --selection least-in-flight|round-robin   (default least-in-flight)
  --deadline-total-ms N, --deadline-prefill-first-output-ms N, --deadline-handoff-ms N,
  --deadline-decode-first-token-ms N, --deadline-idle-ms N   per-phase budgets (none by default)
  --cleanup-budget-ms N            time decode has to take the KV after a client left (120000)
  --health-interval-ms N           between worker health probes (5000)
  --slow-client-timeout-ms N       how long a client may not read before it is given up (30000)
  --grace-period-ms N              on SIGTERM, time for requests under way (30000)
  --keep-alive-timeout-ms N        how long idle client connections stay open (72000)
  --max-body-bytes N               the largest request body accepted (8388608)
  --log-level LEVEL                pino level (default info)
`;

type Raw = Record<string, unknown>;

/**
 * Reads the configuration of `disagg serve` from its arguments, the environment
 * (`DISAGG_*`) and a JSON or YAML file (`--config` / `DISAGG_CONFIG`), in that order of
 * precedence, and checks it.
 *
 * @returns the configuration, or `'help'` when help was asked for.
 * @throws {ConfigError} naming the setting that is missing or wrong.
 */
export function loadServeConfig(args: string[], env: NodeJS.ProcessEnv = process.env): ServeConfig | 'help' {
  let parsed: ReturnType<typeof parseArgs<{ options: typeof OPTIONS; allowPositionals: false }>>;
  try {
    parsed = parseArgs({ args, options: OPTIONS, allowPositionals: false, strict: true });
  } catch (error) {
    throw new ConfigError((error as Error).message);
  }
  const flags = parsed.values;
  if (flags.help === true) return 'help';
  const path = flags.config ?? env.DISAGG_CONFIG;
  const file = path === undefined ? {} : readConfigFile(path);
  const pick = (flag: keyof typeof flags, envName: string, key: string): unknown =>
    flags[flag] ?? env[envName] ?? file[key];

  const connector = pick('connector', 'DISAGG_CONNECTOR', 'connector');
  if (connector !== 'vllm' && connector !== 'sglang') {
    throw new ConfigError(`--connector must be 'vllm' or 'sglang', got ${describeValue(connector)}`);
  }
  const bootstrapPort = optionalNumber(
    '--bootstrap-port',
    pick('bootstrap-port', 'DISAGG_BOOTSTRAP_PORT', 'bootstrapPort'),
  );
  const prefill = workers('--prefill', flags.prefill ?? env.DISAGG_PREFILL ?? file.prefill).map((worker) => ({
    ...worker,
    ...(connector === 'sglang' && (worker as ProxyPrefillWorker).bootstrapPort === undefined
      ? { bootstrapPort: bootstrapPort ?? 8998 }
      : {}),
  }));
  const decode = workers('--decode', flags.decode ?? env.DISAGG_DECODE ?? file.decode);
  const selection = pick('selection', 'DISAGG_SELECTION', 'selection') ?? 'least-in-flight';
  if (selection !== 'least-in-flight' && selection !== 'round-robin') {
    throw new ConfigError(`--selection must be 'least-in-flight' or 'round-robin', got ${describeValue(selection)}`);
  }
  const fileDeadlines = (file.deadlines ?? {}) as Raw;
  const deadline = (flag: keyof typeof flags, envName: string, key: string) =>
    optionalNumber(`--${flag}`, flags[flag] ?? env[envName] ?? fileDeadlines[key]);
  let deadlines: Deadlines;
  try {
    deadlines = checkDeadlines(
      dropUndefined({
        totalMs: deadline('deadline-total-ms', 'DISAGG_DEADLINE_TOTAL_MS', 'totalMs'),
        prefillFirstOutputMs: deadline(
          'deadline-prefill-first-output-ms',
          'DISAGG_DEADLINE_PREFILL_FIRST_OUTPUT_MS',
          'prefillFirstOutputMs',
        ),
        handoffMs: deadline('deadline-handoff-ms', 'DISAGG_DEADLINE_HANDOFF_MS', 'handoffMs'),
        decodeFirstTokenMs: deadline(
          'deadline-decode-first-token-ms',
          'DISAGG_DEADLINE_DECODE_FIRST_TOKEN_MS',
          'decodeFirstTokenMs',
        ),
        idleMs: deadline('deadline-idle-ms', 'DISAGG_DEADLINE_IDLE_MS', 'idleMs'),
      }),
    );
  } catch (error) {
    throw new ConfigError((error as Error).message);
  }
  const port = optionalNumber('--port', pick('port', 'DISAGG_PORT', 'port')) ?? 8000;
  if (!Number.isInteger(port) || port < 0 || port > 65535) throw new ConfigError(`--port must be 0-65535, got ${port}`);
  return {
    connector,
    prefill,
    decode,
    host: String(pick('host', 'DISAGG_HOST', 'host') ?? '0.0.0.0'),
    port,
    selection,
    deadlines,
    cleanupBudgetMs: optionalNumber(
      '--cleanup-budget-ms',
      pick('cleanup-budget-ms', 'DISAGG_CLEANUP_BUDGET_MS', 'cleanupBudgetMs'),
    ),
    healthIntervalMs:
      optionalNumber(
        '--health-interval-ms',
        pick('health-interval-ms', 'DISAGG_HEALTH_INTERVAL_MS', 'healthIntervalMs'),
      ) ?? 5000,
    slowClientTimeoutMs:
      optionalNumber(
        '--slow-client-timeout-ms',
        pick('slow-client-timeout-ms', 'DISAGG_SLOW_CLIENT_TIMEOUT_MS', 'slowClientTimeoutMs'),
      ) ?? 30_000,
    gracePeriodMs:
      optionalNumber('--grace-period-ms', pick('grace-period-ms', 'DISAGG_GRACE_PERIOD_MS', 'gracePeriodMs')) ?? 30_000,
    keepAliveTimeoutMs:
      optionalNumber(
        '--keep-alive-timeout-ms',
        pick('keep-alive-timeout-ms', 'DISAGG_KEEP_ALIVE_TIMEOUT_MS', 'keepAliveTimeoutMs'),
      ) ?? 72_000,
    maxBodyBytes:
      optionalNumber('--max-body-bytes', pick('max-body-bytes', 'DISAGG_MAX_BODY_BYTES', 'maxBodyBytes')) ??
      8 * 1024 * 1024,
    logLevel: String(pick('log-level', 'DISAGG_LOG_LEVEL', 'logLevel') ?? 'info'),
  };
}

function readConfigFile(path: string): Raw {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (error) {
    throw new ConfigError(`Cannot read the config file ${path}: ${(error as Error).message}`);
  }
  let parsed: unknown;
  try {
    parsed = /\.ya?ml$/i.test(path) ? parseYaml(text) : JSON.parse(text);
  } catch (error) {
    throw new ConfigError(
      `The config file ${path} is not valid ${/\.ya?ml$/i.test(path) ? 'YAML' : 'JSON'}: ${(error as Error).message}`,
    );
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
    throw new ConfigError(`The config file ${path} must hold an object of settings`);
  }
  return parsed as Raw;
}

/** Workers from repeated flags, a comma-separated string, or a list of URLs or objects. */
function workers(flag: string, value: unknown): Array<{ url: string; bootstrapPort?: number }> {
  const list: unknown[] = Array.isArray(value)
    ? value.flatMap((entry) => (typeof entry === 'string' ? entry.split(',') : [entry]))
    : typeof value === 'string'
      ? value.split(',')
      : [];
  const result = list
    .map((entry) => (typeof entry === 'string' ? { url: entry.trim() } : entry))
    .filter(
      (entry) => !(typeof (entry as { url?: unknown }).url === 'string' && (entry as { url: string }).url === ''),
    );
  if (result.length === 0) throw new ConfigError(`${flag} is required: at least one worker URL`);
  for (const entry of result) {
    const url = (entry as { url?: unknown } | null)?.url;
    if (typeof url !== 'string' || !/^https?:\/\/[^/]+/.test(url)) {
      throw new ConfigError(
        `${flag}: ${describeValue(url ?? entry)} is not an http(s) URL such as http://10.0.0.2:8000`,
      );
    }
  }
  return result as Array<{ url: string; bootstrapPort?: number }>;
}

function optionalNumber(name: string, value: unknown): number | undefined {
  if (value === undefined || value === null || value === '') return undefined;
  const number = typeof value === 'number' ? value : Number(value);
  if (!Number.isFinite(number) || number < 0) {
    throw new ConfigError(`${name} must be a non-negative number, got ${describeValue(value)}`);
  }
  return number;
}

function dropUndefined<T extends Record<string, unknown>>(value: T): Partial<T> {
  return Object.fromEntries(Object.entries(value).filter(([, entry]) => entry !== undefined)) as Partial<T>;
}
