// Decode migration through `disagg serve` (the built bin, as the image runs it), with the
// official openai client: a decode worker killed mid-stream, the client's stream goes on.
import OpenAI from 'openai';
import { request } from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import { serveBin } from '../support/bin.js';
import { eventually, fakeWorkers } from '../support/http.js';

const fakes = fakeWorkers();
const cleanups: Array<() => unknown> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

const twenty = Array.from({ length: 20 }, (_, i) => `tok${i} `).join('');

describe('disagg serve --migration-limit', () => {
  for (const protocol of ['vllm', 'sglang'] as const) {
    it(`${protocol}: a decode worker killed after 5 of 20 tokens; chat and completions clients receive all 20 once`, async () => {
      const prefill = await fakes.start({ role: 'prefill', protocol });
      // The first decode worker breaks every stream after five tokens; the second never does.
      const broken = await fakes.start({
        role: 'decode',
        protocol,
        tokens: 20,
        fault: { type: 'reset', afterTokens: 5 },
      });
      const whole = await fakes.start({ role: 'decode', protocol, tokens: 20 });
      const proxy = await serveBin(
        [
          '--connector',
          protocol,
          '--prefill',
          prefill.url,
          ...(protocol === 'sglang' ? ['--bootstrap-port', String(prefill.bootstrapPort)] : []),
          '--decode',
          broken.url,
          '--decode',
          whole.url,
          '--decode-policy',
          'round-robin',
          '--migration-limit',
          '1',
        ],
        { cleanups },
      );
      const client = new OpenAI({ baseURL: `${proxy.url}/v1`, apiKey: 'x', maxRetries: 0 });
      // Round-robin: each request starts on the broken worker, its continuation takes the other.
      let completion = '';
      for await (const chunk of await client.completions.create({
        model: 'fake-model',
        prompt: 'Tell me',
        max_tokens: 20,
        stream: true,
      }))
        completion += chunk.choices[0]?.text ?? '';
      expect(completion).toBe(twenty);
      let chat = '';
      for await (const chunk of await client.chat.completions.create({
        model: 'fake-model',
        messages: [{ role: 'user', content: 'Tell me' }],
        max_tokens: 20,
        stream: true,
      }))
        chat += chunk.choices[0]?.delta?.content ?? '';
      expect(chat).toBe(twenty);
      const metrics = await (await request(`${proxy.url}/metrics`)).body.text();
      expect(metrics.split('\n').filter((line) => line.startsWith('disagg_migrations_total'))).toEqual([
        'disagg_migrations_total{reason="stream_error",outcome="migrated"} 2',
      ]);
      // The proxy's log lines arrive through its stdout, after the answers they describe.
      await eventually(() => proxy.output.out.includes('continued on another worker'), 'the migration logged');
      // Each request is logged with its migration and the worker it ended on; the broken legs
      // are counted on the worker that broke, not as its successes.
      const finishedLines = () => proxy.output.out.split('\n').filter((line) => line.includes('"request finished"'));
      await eventually(() => finishedLines().length === 2, 'both requests logged');
      const finished = finishedLines().map((line) => JSON.parse(line) as Record<string, unknown>);
      expect(
        finished.map((line) => [line.migrations, line.brokenDecodeWorkers, String(line.decodeWorker).split(' ')[0]]),
      ).toEqual([
        [1, ['decode-0'], 'decode-1'],
        [1, ['decode-0'], 'decode-1'],
      ]);
      const after = await (await request(`${proxy.url}/metrics`)).body.text();
      expect(
        after
          .split('\n')
          .filter((line) => line.startsWith('disagg_worker_legs_total{role="decode"'))
          .sort(),
      ).toEqual([
        'disagg_worker_legs_total{role="decode",worker="decode-0",outcome="migrated"} 2',
        'disagg_worker_legs_total{role="decode",worker="decode-1",outcome="success"} 2',
      ]);
    });
  }
});
