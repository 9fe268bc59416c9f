// Pairing prefill and decode by model revision through `disagg serve` (the built bin): the
// settings file labels each worker with its revision, and the decode pool's scored policy has a
// same-label filter, so that each request's decode worker serves the revision of the prefill
// worker picked before it (as the response's worker headers say).
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { serveBin } from '../support/bin.js';
import { fakeWorkers } from '../support/http.js';

const fakes = fakeWorkers();
const cleanups: Array<() => unknown> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/** The prefill and decode workers that served one completion through the proxy at `url` (its headers). */
async function servedBy(url: string, prompt: string): Promise<[string | null, string | null]> {
  const response = await fetch(`${url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'fake-model', prompt, max_tokens: 2 }),
  });
  expect(response.status).toBe(200);
  await response.text();
  return [response.headers.get('x-disagg-prefill-worker'), response.headers.get('x-disagg-decode-worker')];
}

/** Two prefill and two decode workers, one of each revision, served from a settings file with `routing`. */
async function fleet(routing: Record<string, unknown>) {
  const [p1, p2, d1, d2] = await Promise.all([
    fakes.start({ role: 'prefill', protocol: 'vllm' }),
    fakes.start({ role: 'prefill', protocol: 'vllm' }),
    fakes.start({ role: 'decode', protocol: 'vllm', tokens: 2 }),
    fakes.start({ role: 'decode', protocol: 'vllm', tokens: 2 }),
  ]);
  const revision = (value: string) => ({ labels: { 'disagg.ai/revision': value } });
  const config = join(mkdtempSync(join(tmpdir(), 'disagg-pairing-')), 'disagg.yaml');
  writeFileSync(
    config,
    stringify({
      connector: 'vllm',
      prefill: [
        { url: p1?.url, name: 'prefill-v1', ...revision('v1') },
        { url: p2?.url, name: 'prefill-v2', ...revision('v2') },
      ],
      // The other revision first: a pick by load or in turn reaches it for the first request.
      decode: [
        { url: d2?.url, name: 'decode-v2', ...revision('v2') },
        { url: d1?.url, name: 'decode-v1', ...revision('v1') },
      ],
      decodePolicy: 'scored',
      routing,
    }),
  );
  return (await serveBin(['--config', config], { cleanups })).url;
}

describe('disagg serve pairing prefill and decode workers by revision', () => {
  it("with a same-label filter, each request's decode worker has its prefill worker's revision", async () => {
    const url = await fleet({ scorers: [{ name: 'load' }], filters: [{ name: 'same-label' }] });
    const pairs: Array<[string | null, string | null]> = [];
    for (let i = 0; i < 6; i++) pairs.push(await servedBy(url, `question ${i}`));
    // Both prefill workers served, and each time with the decode worker of its revision.
    expect(new Set(pairs.map(([prefill]) => prefill))).toEqual(new Set(['prefill-v1', 'prefill-v2']));
    for (const [prefill, decode] of pairs) expect(decode?.replace('decode', '')).toBe(prefill?.replace('prefill', ''));
  }, 30_000);

  it('without it, the same fleet mixes revisions (the filter is what pairs them)', async () => {
    const url = await fleet({ scorers: [{ name: 'load' }] });
    const pairs: Array<[string | null, string | null]> = [];
    for (let i = 0; i < 6; i++) pairs.push(await servedBy(url, `question ${i}`));
    expect(pairs.some(([prefill, decode]) => decode?.replace('decode', '') !== prefill?.replace('prefill', ''))).toBe(
      true,
    );
  }, 30_000);
});
