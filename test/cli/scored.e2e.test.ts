// The scored policy through `disagg serve` (the built bin): the settings file composes it from
// the kv-usage scorer, the proxy scrapes the fake engines' /metrics, and requests go to the
// decode worker whose engine reports the emptier KV cache.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import type { FakeWorker } from '../../src/testing/fake-worker.js';
import { serveBin } from '../support/bin.js';
import { eventuallyAsync, fakeWorkers } from '../support/http.js';

const fakes = fakeWorkers();
const cleanups: Array<() => unknown> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

const ids = (n: number, from: number) => Array.from({ length: n }, (_, i) => from + i);

/** The KV usage `worker`'s engine reports on its /metrics. */
async function kvUsageOf(worker: FakeWorker): Promise<number> {
  const text = await (await fetch(`${worker.url}/metrics`)).text();
  const line = text.split('\n').find((each) => each.startsWith('vllm:kv_cache_usage_perc'));
  return Number(line?.split(' ').at(-1));
}

/** Which decode worker served one short completion through the proxy at `url` (the response's header). */
async function decodedBy(url: string, prompt: string): Promise<string | null> {
  const response = await fetch(`${url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'fake-model', prompt, max_tokens: 2 }),
  });
  expect(response.status).toBe(200);
  await response.text();
  return response.headers.get('x-disagg-decode-worker');
}

/**
 * One prefill and two decode fakes (`full`, listed first, with half its KV cache in use, and
 * `empty`), and `disagg serve` started from a settings file with those workers, `decodePolicy`
 * scored and `routing` as given.
 */
async function scoredFleet(routing: Record<string, unknown>) {
  const prefill = await fakes.start({ role: 'prefill', protocol: 'vllm' });
  const [full, empty] = (await Promise.all(
    [0, 1].map(() =>
      fakes.start({ role: 'decode', protocol: 'vllm', tokens: 2, kvCache: { blockSize: 16, capacityBlocks: 64 } }),
    ),
  )) as [FakeWorker, FakeWorker];
  // Half of one engine's cache in use before the proxy starts: its /metrics says 0.5.
  await full.kvCache?.compute({ prompt: ids(32 * 16, 1) });
  const config = join(mkdtempSync(join(tmpdir(), 'disagg-scored-')), 'disagg.yaml');
  writeFileSync(
    config,
    stringify({
      connector: 'vllm',
      prefill: [{ url: prefill.url }],
      // The full one first: a pick by order or in turn would reach it.
      decode: [
        { url: full.url, name: 'full' },
        { url: empty.url, name: 'empty' },
      ],
      decodePolicy: 'scored',
      routing,
    }),
  );
  const served = await serveBin(['--config', config], { cleanups });
  return { full, empty, url: served.url };
}

describe('disagg serve with a scored policy from its settings file', () => {
  it('decodePolicy scored with kv-usage sends requests to the decode worker reporting the lower KV usage', async () => {
    const { full, empty, url } = await scoredFleet({
      scorers: [{ name: 'kv-usage', weight: 2 }],
      engineLoadIntervalMs: 50,
    });
    expect(await kvUsageOf(full)).toBe(0.5);
    expect(await kvUsageOf(empty)).toBe(0);
    const decoded: Array<string | null> = [];
    for (let i = 0; i < 4; i++) decoded.push(await decodedBy(url, `question ${i}`));
    expect(decoded).toEqual(['empty', 'empty', 'empty', 'empty']);
    // And the proxy read that from the engines: it follows when the usage turns.
    await empty.kvCache?.compute({ prompt: ids(60 * 16, 100_000) });
    await eventuallyAsync(
      async () => (await decodedBy(url, 'again')) === 'full',
      'the proxy sending to the worker whose engine now reports the lower usage',
    );
  }, 30_000);

  it('a low-kv-usage filter and the weighted-random picker from the file: the full worker is passed over whatever the load says', async () => {
    // The load scorer alone would send every other request to the full one.
    const { url } = await scoredFleet({
      scorers: [{ name: 'load' }],
      filters: [{ name: 'low-kv-usage', params: { maxKvUsage: 0.4 } }],
      picker: { name: 'weighted-random' },
      engineLoadIntervalMs: 50,
    });
    // Once the first scrape is in, every request goes to the worker under the threshold.
    await eventuallyAsync(async () => (await decodedBy(url, 'warm')) === 'empty', 'the first reading of the engines');
    const decoded: Array<string | null> = [];
    for (let i = 0; i < 6; i++) decoded.push(await decodedBy(url, `question ${i}`));
    expect(decoded).toEqual(Array(6).fill('empty'));
  }, 30_000);
});
