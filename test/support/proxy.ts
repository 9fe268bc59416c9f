import OpenAI from 'openai';
import { afterEach } from 'vitest';
import type { EngineName } from '../../src/engines/registry.js';
import { createProxy, type ProxyOptions, type ProxyServer } from '../../src/server/proxy.js';
import type { FakeWorker, FakeWorkerOptions } from '../../src/testing/index.js';
import { recordingLogger } from './async.js';
import { fakeWorkers } from './http.js';

/**
 * Proxies in front of fake workers for one test file: `setup` starts a prefill and a decode
 * worker of `protocol` and the proxy (its options may depend on the workers), with the official
 * openai client pointed at it; all are
 * closed after each test, and the fakes checked for KV left behind (see `fakeWorkers`).
 */
export function proxyHarness() {
  const fakes = fakeWorkers();
  let proxies: ProxyServer[] = [];
  afterEach(async () => {
    await Promise.all(proxies.map((proxy) => proxy.close({ gracePeriodMs: 0, drainDelayMs: 0 })));
    proxies = [];
  });
  async function setup(
    protocol: EngineName,
    workers: { prefill?: Partial<FakeWorkerOptions>; decode?: Partial<FakeWorkerOptions> } = {},
    options:
      | Partial<ProxyOptions>
      | ((workers: { prefill: FakeWorker; decode: FakeWorker }) => Partial<ProxyOptions>) = {},
  ) {
    const prefill = await fakes.start({ role: 'prefill', protocol, ...workers.prefill });
    const decode = await fakes.start({ role: 'decode', protocol, tokens: 4, ...workers.decode });
    const logger = recordingLogger();
    const proxy = createProxy({
      connector: protocol,
      prefill: [{ url: prefill.url, ...(protocol === 'sglang' ? { bootstrapPort: prefill.bootstrapPort } : {}) }],
      decode: [{ url: decode.url }],
      logger: logger.logger,
      ...(typeof options === 'function' ? options({ prefill, decode }) : options),
    });
    proxies.push(proxy);
    const url = await proxy.listen(0);
    const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'unused', maxRetries: 0 });
    return { prefill, decode, proxy, url, client, logs: logger.records };
  }
  /**
   * Like `setup`, with a pool of fake workers per role: one per entry of `workers.prefill` and
   * `workers.decode` (its options), listed to the proxy in that order.
   */
  async function cluster(
    protocol: EngineName,
    workers: { prefill: Array<Partial<FakeWorkerOptions>>; decode: Array<Partial<FakeWorkerOptions>> },
    options: Partial<ProxyOptions> = {},
  ) {
    const prefill: FakeWorker[] = [];
    for (const each of workers.prefill) prefill.push(await fakes.start({ role: 'prefill', protocol, ...each }));
    const decode: FakeWorker[] = [];
    for (const each of workers.decode) decode.push(await fakes.start({ role: 'decode', protocol, tokens: 4, ...each }));
    const logger = recordingLogger();
    const proxy = createProxy({
      connector: protocol,
      prefill: prefill.map((worker) => ({
        url: worker.url,
        ...(protocol === 'sglang' ? { bootstrapPort: worker.bootstrapPort } : {}),
      })),
      decode: decode.map((worker) => ({ url: worker.url })),
      logger: logger.logger,
      ...options,
    });
    proxies.push(proxy);
    const url = await proxy.listen(0);
    const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'unused', maxRetries: 0 });
    return { prefill, decode, proxy, url, client, logs: logger.records };
  }
  return { setup, cluster, fakes };
}
