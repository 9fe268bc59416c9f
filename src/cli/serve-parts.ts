// What the commands that run a server share: their logger, and one line for each problem of
// their settings or start (never a stack trace: what `kubectl logs` shows of a crash loop).
import { type Logger, pino } from 'pino';
import { DiscoveryUnavailableError } from '../discovery/kubernetes-discovery.js';
import { KvEventsUnavailableError } from '../kv/kv-subscriber.js';
import { ConfigError, type ServeConfig } from '../server/config.js';
import type { ProxyCore } from '../server/proxy-core.js';
import { DisaggError } from '../util/disagg-error.js';
import { TracingUnavailableError } from './otlp-tracing.js';

/**
 * The codes of the errors a start meets for a setting as given (a file it names, a directory):
 * what to change is in the operator's hands, as with a bad flag. Matched on the stable code,
 * not `instanceof`, so that an error of another copy of the library counts too.
 */
const SETTING_CODES: ReadonlySet<string> = new Set(['DISAGG_CONFIG', 'DISAGG_TENANTS_FILE', 'DISAGG_TOKENIZER']);

/**
 * The problems of the settings that `error` reports, one line each; undefined for an error
 * that is not about a setting (a bug, a port in use).
 *
 * @example
 * settingProblems(new ConfigError('--port must be a port number')); // ['--port must be a port number']
 */
export function settingProblems(error: unknown): readonly string[] | undefined {
  if (ConfigError.is(error)) return error.problems;
  if (DisaggError.is(error) && SETTING_CODES.has(error.code)) return [error.message];
  return undefined;
}

/**
 * The problems, one line each, and where to read more: not the whole help, nor a stack trace,
 * which is what `kubectl logs` would show of a crash loop otherwise. Exit status 2.
 *
 * @example
 * process.exitCode = configProblems(['--port must be a port number'], 'serve');
 */
export function configProblems(problems: readonly string[], command = 'serve'): number {
  // One line each, whatever a message holds (a parser's excerpt of the file, say).
  for (const problem of problems) console.error(`disagg ${command}: ${problem.replace(/\s*\n\s*/g, ' ')}`);
  console.error(`See 'disagg ${command} --help' for every setting.`);
  return 2;
}

/** JSON lines to stdout; or, with --log-format pretty, pino-pretty's lines (an optional dependency). */
export async function createLogger(config: ServeConfig): Promise<Logger> {
  // An error's own message, its causes nested (pino's default joins every cause's message
  // into it, and the library's errors already hold their cause's text).
  const serializers = { err: pino.stdSerializers.errWithCause };
  if (config.logFormat !== 'pretty') return pino({ level: config.logLevel, serializers }, logDestination());
  let pretty: (options: object) => NodeJS.WritableStream;
  try {
    pretty = ((await import('pino-pretty')) as unknown as { default: typeof pretty }).default;
  } catch {
    throw new PrettyMissing();
  }
  return pino({ level: config.logLevel, serializers }, pretty({ colorize: process.stdout.isTTY, sync: true }));
}

/**
 * Standard output, written off the event loop and gathered: pino's default writes each line
 * with a blocking write(2) of its own, and the request log is a line per request. Measured by
 * bench/proxy.mjs at 50 streams in flight, that write was the proxy's costliest call after the
 * sockets' own (a sixth of its CPU on one core), and it stalls every stream while a slow log
 * reader keeps the pipe full. Lines wait at most LOG_FLUSH_MS, or until 4 KB gather; pino
 * writes what is left when the process exits (a crash included; SIGKILL loses that much).
 */
function logDestination() {
  return pino.destination({ dest: 1, sync: false, minLength: 4096, periodicFlush: LOG_FLUSH_MS });
}

/** The longest a log line waits to be written, in ms. */
const LOG_FLUSH_MS = 100;

class PrettyMissing extends Error {
  readonly code = 'PRETTY_MISSING';
}

/** One line for the failures of starting that have a usual cause (no stack trace for them). */
export function startupFailure(error: unknown, where: string, command = 'serve'): string | undefined {
  const code = (error as { code?: unknown })?.code;
  if (code === 'PRETTY_MISSING') return '--log-format pretty needs pino-pretty: npm install pino-pretty';
  // An optional dependency the settings need and the install left out: what to install, one line.
  if (TracingUnavailableError.is(error)) return error.message;
  if (DiscoveryUnavailableError.is(error)) return error.message;
  if (KvEventsUnavailableError.is(error)) return error.message;
  if (code === 'EADDRINUSE') return `cannot listen on ${where}: the port is in use (another disagg ${command}?)`;
  if (code === 'EACCES') return `cannot listen on ${where}: permission denied (ports below 1024 need privileges)`;
  if (code === 'EADDRNOTAVAIL') return `cannot listen on ${where}: no such address on this machine`;
  if (code === 'ENOTFOUND' || code === 'EAI_AGAIN') return `cannot listen on ${where}: the host name does not resolve`;
  return undefined;
}

/** Where the pools are found at run time, for the start-up line (what is set only). */
export function discoveryOf(config: ServeConfig): { discovery?: Record<string, unknown> } {
  const { prefillDns, decodeDns, prefillSelector, decodeSelector, namespace } = config.discovery;
  const found = Object.entries({ prefillDns, decodeDns, prefillSelector, decodeSelector, namespace }).filter(
    ([, value]) => value !== undefined,
  );
  return found.length === 0 ? {} : { discovery: Object.fromEntries(found) };
}

/**
 * What the proxy runs with, for the start-up line: the policies, the migration limit, the
 * tenants (the file's, the default one aside), whether Redis is shared, the tokenizer and the
 * KV events port: what an operator checks first when routing or limits look wrong.
 *
 * @example
 * logger.info({ url, ...runsWith(core) }, 'disagg serve listening');
 */
export function runsWith(core: Pick<ProxyCore, 'options' | 'tenants'>): Record<string, unknown> {
  const { options } = core;
  return {
    policies: { prefill: options.prefillPolicy, decode: options.decodePolicy },
    migrationLimit: options.migration.limit,
    tenants: core.tenants.tenants.length - 1,
    redis: options.redisUrl !== undefined,
    tokenizer: options.tokenizer.dir ?? null,
    kvEventsPort: options.kvEvents.port ?? null,
  };
}

/** `value` without its undefined entries. */
export function dropUndefined<T extends object>(value: T): T {
  return Object.fromEntries(Object.entries(value).filter(([, entry]) => entry !== undefined)) as T;
}
