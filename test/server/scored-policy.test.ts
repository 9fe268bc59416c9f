// The scored policy as the settings configure it, and the proxy wiring what the configured
// plugins declare they consume: a bad scorer is one line, a missing data source is refused, and
// the engines' load is scraped only for a plugin that reads it.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { SCORER_NAMES } from '../../src/routing/plugins.js';
import { loadServeConfig } from '../../src/server/config.js';
import { ConfigError, type ProxyOptions, resolveProxyOptions } from '../../src/server/options.js';
import { createProxy, type ProxyServer } from '../../src/server/proxy.js';

const WORKERS = {
  connector: 'vllm',
  prefill: [{ url: 'http://p.example:8100' }],
  decode: [{ url: 'http://d.example:8200' }],
} as const;

/** The one-line message `options` are refused with. */
function refusal(options: Partial<ProxyOptions>): string {
  try {
    resolveProxyOptions({ ...WORKERS, ...options } as ProxyOptions);
  } catch (error) {
    expect(error).toBeInstanceOf(ConfigError);
    const message = (error as ConfigError).message;
    expect(message.split('\n')).toHaveLength(1);
    return message;
  }
  throw new Error('accepted');
}

describe('scored from the settings: one line for a bad scorer', () => {
  it('an unknown scorer is one line with a suggestion, as an option, a flag and a file key', () => {
    const known = SCORER_NAMES.join(', ');
    expect(refusal({ decodePolicy: 'scored', routing: { scorers: [{ name: 'kv-usge' }] } })).toBe(
      `routing.scorers names no scorer "kv-usge" (did you mean kv-usage?): the scorers are ${known}`,
    );
    const flags = ['--connector', 'vllm', '--prefill', 'http://p:1', '--decode', 'http://d:2'];
    expect(() => loadServeConfig([...flags, '--scorers', 'qeue:2'], {})).toThrow(
      `--scorers (routing.scorers) names no scorer "qeue" (did you mean queue?): the scorers are ${known}`,
    );
    const path = join(mkdtempSync(join(tmpdir(), 'disagg-scored-')), 'disagg.yaml');
    writeFileSync(path, 'decodePolicy: scored\nrouting:\n  scorers:\n    - { name: kv-usag, weight: 2 }\n');
    expect(() => loadServeConfig([...flags, '--config', path], {})).toThrow(
      `routing.scorers in ${path} names no scorer "kv-usag" (did you mean kv-usage?): the scorers are ${known}`,
    );
  });

  it('a parameter out of range is one line naming the plugin and the parameter', () => {
    expect(refusal({ routing: { scorers: [{ name: 'prefix', params: { maxTreeChars: 0 } }] } })).toBe(
      'routing.scorers has scorer prefix with maxTreeChars 0: it must be a positive whole number',
    );
    expect(refusal({ routing: { scorers: [{ name: 'kv-usage', weight: -1 }] } })).toBe(
      'routing.scorers has scorer kv-usage with weight -1: it must be a number above 0',
    );
  });
});

describe('the filters and the picker of a scored policy, as settings', () => {
  const flags = ['--connector', 'vllm', '--prefill', 'http://p:1', '--decode', 'http://d:2'];
  const served = (argv: string[]) => {
    const loaded = loadServeConfig([...flags, ...argv], {});
    if (loaded === 'help') throw new Error('expected a config');
    return loaded;
  };

  it('come as flags, file keys and options; slo-feasible and max-score by default', () => {
    expect(served([]).routing).toMatchObject({ filters: [{ name: 'slo-feasible' }], picker: { name: 'max-score' } });
    expect(
      served([
        '--decode-policy',
        'scored',
        '--filters',
        'low-queue',
        '--picker',
        'weighted-random',
        '--engine-load-interval-ms',
        '50',
      ]).routing,
    ).toMatchObject({ filters: [{ name: 'low-queue' }], picker: { name: 'weighted-random' } });
    const path = join(mkdtempSync(join(tmpdir(), 'disagg-scored-')), 'disagg.yaml');
    writeFileSync(
      path,
      'decodePolicy: scored\nrouting:\n  engineLoadIntervalMs: 50\n  filters:\n    - { name: low-kv-usage, params: { maxKvUsage: 0.9 } }\n  picker: { name: weighted-random }\n',
    );
    expect(served(['--config', path]).routing).toMatchObject({
      filters: [{ name: 'low-kv-usage', params: { maxKvUsage: 0.9 } }],
      picker: { name: 'weighted-random' },
    });
    expect(
      resolveProxyOptions({
        ...WORKERS,
        routing: { engineLoadIntervalMs: 50, filters: [{ name: 'low-queue', params: { maxWaiting: 4 } }] },
      }).routing.filters,
    ).toEqual([{ name: 'low-queue', params: { maxWaiting: 4 } }]);
  });

  it('a misspelt filter or picker, or a parameter out of range, is one line naming the setting', () => {
    expect(refusal({ routing: { filters: [{ name: 'low-kv' }] } })).toMatch(
      /^routing.filters names no filter "low-kv"(.*): the filters are low-queue, low-kv-usage, same-label, slo-feasible$/,
    );
    expect(() => served(['--picker', 'max'])).toThrow(/^--picker \(routing.picker\) names no picker "max"/);
    expect(refusal({ routing: { filters: [{ name: 'low-kv-usage', params: { maxKvUsage: 0 } }] } })).toBe(
      'routing.filters has filter low-kv-usage with maxKvUsage 0: it must be a number above 0 and at most 1',
    );
  });

  it("a filter reading the engines' load needs --engine-load-interval-ms, as a scorer does", () => {
    expect(
      refusal({
        prefillPolicy: 'least-in-flight',
        decodePolicy: 'scored',
        routing: { filters: [{ name: 'low-queue' }] },
      }),
    ).toBe(
      "decodePolicy 'scored' scores the engines' load from their /metrics: set routing.engineLoadIntervalMs (--engine-load-interval-ms), such as 100",
    );
  });
});

describe('the settings refuse a policy the data it requires is not provided for', () => {
  it("a scorer reading the engines' load needs --engine-load-interval-ms, and an engine that reports it", () => {
    const kvUsage = {
      prefillPolicy: 'least-in-flight',
      decodePolicy: 'scored',
      routing: { scorers: [{ name: 'kv-usage' }] },
    } as const;
    expect(refusal(kvUsage)).toBe(
      "decodePolicy 'scored' scores the engines' load from their /metrics: set routing.engineLoadIntervalMs (--engine-load-interval-ms), such as 100",
    );
    expect(
      refusal({ ...kvUsage, connector: 'trtllm', routing: { ...kvUsage.routing, engineLoadIntervalMs: 50 } }),
    ).toBe(
      "decodePolicy 'scored' scores the engines' load from their /metrics, which the trtllm engine does not report",
    );
    const given = resolveProxyOptions({
      ...WORKERS,
      ...kvUsage,
      routing: { ...kvUsage.routing, engineLoadIntervalMs: 50 },
    });
    expect(given.routing.scorers).toEqual([{ name: 'kv-usage', weight: 1 }]);
  });

  it("a scorer reading the KV index needs the engines' KV events, as precise-prefix does", () => {
    expect(refusal({ prefillPolicy: 'scored', routing: { scorers: [{ name: 'kv-prefix' }] } })).toMatch(
      /^prefillPolicy 'scored' routes on the engines' KV cache events: set kvEvents\.port/,
    );
    expect(refusal({ prefillPolicy: 'precise-prefix' })).toMatch(
      /^prefillPolicy 'precise-prefix' routes on the engines' KV cache events/,
    );
  });

  it('conditional aggregation on cached share asks whether the decode policy knows the caches', () => {
    expect(refusal({ decodePolicy: 'scored', routing: { aggregateCachedRatio: 0.5 } })).toMatch(
      /needs decodePolicy 'cache-aware' or 'precise-prefix' \(--decode-policy\).*decodePolicy is 'scored'$/,
    );
  });
});

describe("the proxy scrapes the engines' load only when a configured plugin consumes it", () => {
  let proxies: ProxyServer[] = [];
  const servers: Array<ReturnType<typeof createServer>> = [];
  afterEach(async () => {
    await Promise.all(proxies.map((proxy) => proxy.close({ gracePeriodMs: 0, drainDelayMs: 0 })));
    proxies = [];
    for (const server of servers.splice(0)) {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    }
  });

  /** A worker that answers every probe and counts the scrapes of its `/metrics`. */
  async function worker() {
    const seen = { scrapes: 0 };
    const server = createServer((req, res) => {
      if (req.url === '/metrics') seen.scrapes++;
      res.writeHead(200, { 'content-type': 'text/plain' });
      res.end(req.url === '/metrics' ? 'vllm:kv_cache_usage_perc{model_name="m"} 0.5\n' : '{}');
    });
    servers.push(server);
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, seen };
  }

  async function scrapesWith(options: Partial<ProxyOptions>): Promise<number> {
    const [prefill, decode] = await Promise.all([worker(), worker()]);
    const proxy = createProxy({
      connector: 'vllm',
      prefill: [{ url: prefill.url }],
      decode: [{ url: decode.url }],
      ...options,
      routing: { engineLoadIntervalMs: 20, ...options.routing },
    });
    proxies.push(proxy);
    await proxy.listen(0, '127.0.0.1');
    // Several intervals: a scraper would have read each worker more than once by now.
    await new Promise((resolve) => setTimeout(resolve, 100));
    return prefill.seen.scrapes + decode.seen.scrapes;
  }

  it('no scrape for policies that declare no engine load, even with an interval set', async () => {
    // No decider either: the default prefill-busy reads the engines' load where it is scraped.
    const none = { deciders: [] };
    expect(
      await scrapesWith({ prefillPolicy: 'least-in-flight', decodePolicy: 'cache-aware', routing: { ...none } }),
    ).toBe(0);
    expect(
      await scrapesWith({
        prefillPolicy: 'least-in-flight',
        decodePolicy: 'scored',
        routing: { ...none, scorers: [{ name: 'load' }], filters: [] },
      }),
    ).toBe(0);
  });

  it('scrapes for a scored policy with kv-usage, and for precise-prefix (which reads it when given)', async () => {
    expect(await scrapesWith({ decodePolicy: 'scored', routing: { scorers: [{ name: 'kv-usage' }] } })).toBeGreaterThan(
      0,
    );
    expect(await scrapesWith({ prefillPolicy: 'precise-prefix', kvEvents: { port: 1 } })).toBeGreaterThan(0);
  });
});
