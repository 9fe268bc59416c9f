// Workers of SGLang prefill get the proxy's bootstrap port, at start and when they join later;
// a worker joining at run time is checked by the same row as one given at start.
import { type EngineName, engineOf } from '../../engines/registry.js';
import { describeValue } from '../../util/describe-value.js';
import { SETTINGS } from './rows.js';
import { ConfigError, parseSetting, type Setting } from './setting.js';
import type { ResolvedProxyOptions } from './types.js';
import type { ProxyDecodeWorker, ProxyPrefillWorker } from './worker-entries.js';

/** The worker lists with SGLang's bootstrap port given to prefill workers that name none. */
export function withWorkers(values: Record<string, unknown>): Record<string, unknown> {
  if (!engineOf(values.connector as EngineName).prefillBootstrap) return values;
  return {
    ...values,
    prefill: (values.prefill as ProxyPrefillWorker[]).map((worker) =>
      withBootstrap(worker, values.bootstrapPort as number),
    ),
  };
}

/** A prefill worker with the proxy's bootstrap port, unless it names its own. */
function withBootstrap(worker: ProxyPrefillWorker, bootstrapPort: number): ProxyPrefillWorker {
  return { ...worker, bootstrapPort: worker.bootstrapPort ?? bootstrapPort };
}

/**
 * A worker joining at run time (the admin API, discovery), checked as `--prefill`/`--decode`
 * entries are: a URL or an object with the same fields; SGLang prefill workers get the
 * proxy's bootstrap port when they name none.
 *
 * @throws {ConfigError} saying what is wrong with it.
 */
export function checkWorker(
  role: 'prefill' | 'decode',
  value: unknown,
  options: Pick<ResolvedProxyOptions, 'connector' | 'bootstrapPort'>,
): ProxyPrefillWorker | ProxyDecodeWorker {
  const setting = SETTINGS.find((candidate) => candidate.key === role) as Setting;
  if (value === undefined || value === '' || (Array.isArray(value) && value.length !== 1)) {
    throw new ConfigError(`A ${role} worker is a URL or an object with a url, got ${describeValue(value)}`);
  }
  const [worker] = parseSetting(setting, Array.isArray(value) ? value : [value], {
    kind: 'option',
  }) as ProxyPrefillWorker[];
  if (worker === undefined)
    throw new ConfigError(`A ${role} worker is a URL or an object with a url, got ${describeValue(value)}`);
  return role === 'prefill' && engineOf(options.connector).prefillBootstrap
    ? withBootstrap(worker, options.bootstrapPort)
    : worker;
}
