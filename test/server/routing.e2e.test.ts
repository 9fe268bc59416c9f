import OpenAI from 'openai';
import { request } from 'undici';
import { describe, expect, it } from 'vitest';
import { POLICY_NAMES } from '../../src/routing/registry.js';
import type { RoutingInput } from '../../src/routing/routing-input.js';
import { createProxy, type ProxyOptions } from '../../src/server/proxy.js';
import type { ProxyCore } from '../../src/server/proxy-core.js';
import type { FakeWorkerOptions } from '../../src/testing/index.js';
import { eventually } from '../support/http.js';
import { proxyHarness } from '../support/proxy.js';

const harness = proxyHarness();

/** Three prefill and three decode vLLM workers behind one proxy. */
function cluster(options: Partial<ProxyOptions>, prefillOptions: Partial<FakeWorkerOptions> = {}) {
  return harness.cluster(
    'vllm',
    {
      prefill: [prefillOptions, prefillOptions, prefillOptions],
      decode: [{ tokens: 2 }, { tokens: 2 }, { tokens: 2 }],
    },
    options,
  );
}

/** Plays `turns` of each conversation, interleaved; the workers each turn was routed to. */
async function converse(client: OpenAI, sessions: string[], turns: number) {
  const histories = sessions.map((session) => [
    { role: 'system' as const, content: `You are the assistant of ${session}. Keep to the point. `.repeat(8) },
  ]);
  const routed = sessions.map(() => [] as Array<{ prefill: string | null; decode: string | null }>);
  for (let turn = 0; turn < turns; turn++) {
    for (const [i, session] of sessions.entries()) {
      const history = histories[i] as Array<{ role: 'system' | 'user' | 'assistant'; content: string }>;
      history.push({ role: 'user', content: `Turn ${turn}: what next?` });
      const { data, response } = await client.chat.completions
        .create({ model: 'fake-model', messages: history, max_tokens: 2 }, { headers: { 'x-session-id': session } })
        .withResponse();
      history.push({ role: 'assistant', content: data.choices[0]?.message.content ?? '' });
      routed[i]?.push({
        prefill: response.headers.get('x-disagg-prefill-worker'),
        decode: response.headers.get('x-disagg-decode-worker'),
      });
    }
  }
  return routed;
}

describe('routing by cache and session through the proxy', () => {
  it('--prefill-policy cache-aware keeps each conversation on the prefill worker that holds its history; --decode-policy session by x-session-id', async () => {
    const { client } = await cluster({ prefillPolicy: 'cache-aware', decodePolicy: 'session' });
    const routed = await converse(client, ['alice', 'bob', 'carol'], 4);
    const prefillOf = routed.map((turns) => new Set(turns.map((turn) => turn.prefill)));
    const decodeOf = routed.map((turns) => new Set(turns.map((turn) => turn.decode)));
    for (const workers of [...prefillOf, ...decodeOf]) expect(workers.size).toBe(1);
    // Three conversations, three prefill workers: cold prompts go to the worker holding least.
    expect(new Set(prefillOf.map((workers) => [...workers][0])).size).toBe(3);
  });

  it('a prefix key header stands for the prompt: cache-aware keeps requests with one key together, whatever their text, and apart from other keys', async () => {
    const { client } = await cluster({ prefillPolicy: 'cache-aware', decodePolicy: 'cache-aware' });
    const routedFor = async (key: string, prompts: string[]) => {
      const workers = new Set<string | null>();
      for (const prompt of prompts) {
        const { response } = await client.completions
          .create({ model: 'fake-model', prompt, max_tokens: 2 }, { headers: { 'x-prefix-key': key } })
          .withResponse();
        workers.add(
          `${response.headers.get('x-disagg-prefill-worker')}|${response.headers.get('x-disagg-decode-worker')}`,
        );
      }
      return [...workers];
    };
    // Prompts that share nothing, under one key: one prefill and one decode worker for all.
    const alpha = await routedFor('tenant-a/system-prompt-7', ['first', 'a different text', 'and a third one']);
    expect(alpha).toHaveLength(1);
    // Another key is another prefix: cold, it goes to a worker holding least, not alpha's.
    const beta = await routedFor('tenant-b/system-prompt-1', ['first', 'a different text']);
    expect(beta).toHaveLength(1);
    expect(beta[0]?.split('|')[0]).not.toBe(alpha[0]?.split('|')[0]);
  });

  it('every policy serves both legs end to end', async () => {
    for (const policy of POLICY_NAMES) {
      // precise-prefix follows KV events: a publisher that is not there only leaves it to load.
      const kv = policy === 'precise-prefix' ? { kvEvents: { port: 1 } } : {};
      const { client } = await cluster({ prefillPolicy: policy, decodePolicy: policy, ...kv });
      const answer = await client.completions.create({ model: 'fake-model', prompt: `via ${policy}`, max_tokens: 2 });
      expect(answer.choices[0]?.text, policy).toBe('tok0 tok1 ');
    }
  });

  it('consistent-hash: two router replicas send every conversation to the same workers, sharing nothing', async () => {
    const options = { prefillPolicy: 'consistent-hash', decodePolicy: 'consistent-hash' } as const;
    const { client, prefill, decode } = await cluster(options);
    const replica = createProxy({
      connector: 'vllm',
      prefill: prefill.map((worker) => ({ url: worker.url })),
      decode: decode.map((worker) => ({ url: worker.url })),
      ...options,
    });
    try {
      const url = await replica.listen(0, '127.0.0.1');
      const other = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'x', maxRetries: 0 });
      const sessions = ['alice', 'bob', 'carol', 'dave', 'erin', 'frank'];
      const first = await converse(client, sessions, 2);
      expect(await converse(other, sessions, 2)).toEqual(first);
      // Each conversation stays put, and they do not all share one worker.
      for (const turns of first) expect(new Set(turns.map((turn) => turn.prefill)).size).toBe(1);
      expect(new Set(first.map((turns) => turns[0]?.prefill)).size).toBeGreaterThan(1);
    } finally {
      await replica.close({ gracePeriodMs: 0, drainDelayMs: 0 });
    }
  });

  it('least-in-flight spreads the same conversations without regard to their history', async () => {
    const { client } = await cluster({ selection: 'least-in-flight' });
    const routed = await converse(client, ['alice'], 4);
    expect(new Set(routed[0]?.map((turn) => turn.prefill)).size).toBeGreaterThan(1);
  });

  it('a prefill worker leaving the rotation hands its conversations to another, which then keeps them', async () => {
    const { client, proxy } = await cluster({ prefillPolicy: 'cache-aware' });
    const [first] = await converse(client, ['alice'], 2);
    const name = first?.[0]?.prefill;
    const index = Number(String(name).split('-')[1]);
    proxy.prefillWorkers.setAvailable(proxy.prefillWorkers.workers[index] as { url: string }, false);
    const [after] = await converse(client, ['alice'], 3);
    const moved = new Set(after?.map((turn) => turn.prefill));
    expect(moved.size).toBe(1);
    expect(moved.has(name ?? null)).toBe(false);
  });

  it('with prefix-caching workers the client sees what cache-aware routing saved: cached tokens from the second turn on', async () => {
    const cachedPerTurn = async (options: Partial<ProxyOptions>) => {
      const { client } = await cluster(options, { prefixCache: { blockChars: 16 } });
      const messages: Array<{ role: 'system' | 'user' | 'assistant'; content: string }> = [
        { role: 'system', content: 'You answer questions about the weather. '.repeat(6) },
      ];
      const cached: number[] = [];
      for (let turn = 0; turn < 3; turn++) {
        messages.push({ role: 'user', content: `And on day ${turn}?` });
        const answer = await client.chat.completions.create({ model: 'fake-model', messages, max_tokens: 2 });
        cached.push(answer.usage?.prompt_tokens_details?.cached_tokens ?? -1);
        messages.push({ role: 'assistant', content: answer.choices[0]?.message.content ?? '' });
      }
      return cached;
    };
    const aware = await cachedPerTurn({ prefillPolicy: 'cache-aware' });
    expect(aware[0]).toBe(0);
    expect(aware[1]).toBeGreaterThan(50);
    expect(aware[2]).toBeGreaterThan(aware[1] as number);
    // Round-robin sends each turn to a cold worker: nothing is reused.
    expect(await cachedPerTurn({ prefillPolicy: 'round-robin' })).toEqual([0, 0, 0]);
  });
});

describe('conditional disaggregation, built in', () => {
  const routedMetrics = async (url: string) =>
    (await (await request(`${url}/metrics`)).body.text())
      .split('\n')
      .filter((line) => line.startsWith('disagg_routed_requests_total{'));

  it('--aggregate-below-chars: a short prompt is served on decode alone; the header, the metrics and the log say so', async () => {
    const { client, url, prefill, logs } = await cluster({ routing: { aggregateBelowChars: 200 } });
    const short = await client.completions
      .create({ model: 'fake-model', prompt: 'Hi there', max_tokens: 2 })
      .withResponse();
    expect(short.response.headers.get('x-disagg-strategy')).toBe('skipped-prefill');
    const long = await client.completions
      .create({ model: 'fake-model', prompt: 'x'.repeat(300), max_tokens: 2 })
      .withResponse();
    expect(long.response.headers.get('x-disagg-strategy')).toBe('disaggregated-sequential');
    expect(prefill.reduce((sum, worker) => sum + worker.requests.length, 0)).toBe(1);
    expect(await routedMetrics(url)).toEqual([
      'disagg_routed_requests_total{strategy="aggregated",reason="short-prompt"} 1',
      'disagg_routed_requests_total{strategy="sequential",reason=""} 1',
    ]);
    const fields = logs.map((record) => record.fields as Record<string, unknown>);
    expect(fields.find((entry) => entry.strategy === 'skipped-prefill')).toMatchObject({
      aggregatedBecause: 'short-prompt',
    });
  });

  it('--deciders prefill-busy: once every prefill worker has two requests under way, the next is served on decode alone; the header, the metrics and the log say so', async () => {
    // Each prefill takes 1.5 s: six requests keep the three prefill workers busy meanwhile.
    const { client, url, prefill, logs } = await cluster(
      { routing: { deciders: [{ name: 'prefill-busy' }] } },
      {
        tokenIntervalMs: 1500,
      },
    );
    const ask = () =>
      client.completions.create({ model: 'fake-model', prompt: 'x'.repeat(300), max_tokens: 2 }).withResponse();
    const busy = Array.from({ length: 6 }, ask);
    await eventually(
      () => prefill.reduce((sum, worker) => sum + worker.requests.length, 0) === 6,
      'six prefills under way',
    );
    const next = await ask();
    expect(next.response.headers.get('x-disagg-strategy')).toBe('skipped-prefill');
    const strategies = (await Promise.all(busy)).map(({ response }) => response.headers.get('x-disagg-strategy'));
    expect(strategies).toEqual(Array(6).fill('disaggregated-sequential'));
    expect(await routedMetrics(url)).toContain(
      'disagg_routed_requests_total{strategy="aggregated",reason="prefill-busy"} 1',
    );
    const fields = logs.map((record) => record.fields as Record<string, unknown>);
    expect(fields.find((entry) => entry.strategy === 'skipped-prefill')).toMatchObject({
      aggregatedBecause: 'prefill-busy',
    });
  });

  it('--aggregate-cached-ratio with --decode-policy cache-aware: a prompt its decode worker already holds skips prefill', async () => {
    const { client, url, prefill } = await cluster({
      decodePolicy: 'cache-aware',
      routing: { aggregateCachedRatio: 0.9 },
    });
    const prompt = `Summarise this report. ${'data '.repeat(100)}`;
    const strategies: Array<string | null> = [];
    for (let i = 0; i < 2; i++) {
      const { response } = await client.completions
        .create({ model: 'fake-model', prompt, max_tokens: 2 })
        .withResponse();
      strategies.push(response.headers.get('x-disagg-strategy'));
    }
    expect(strategies).toEqual(['disaggregated-sequential', 'skipped-prefill']);
    expect(prefill.reduce((sum, worker) => sum + worker.requests.length, 0)).toBe(1);
    expect(await routedMetrics(url)).toContain(
      'disagg_routed_requests_total{strategy="aggregated",reason="decode-cached"} 1',
    );
  });

  it('--aggregate-cached-ratio without a cache-aware decode policy is refused, saying what it needs', () => {
    expect(() =>
      createProxy({
        connector: 'vllm',
        prefill: [{ url: 'http://p' }],
        decode: [{ url: 'http://d' }],
        routing: { aggregateCachedRatio: 0.9 },
      }),
    ).toThrow("needs decodePolicy 'cache-aware' or 'precise-prefix' (--decode-policy)");
  });
});

describe('routing by predicted latency, learned from the requests served', () => {
  it("--filters slo-feasible: once the router has timed each prefill worker's first tokens, the one too slow for the request's TTFT target is passed over", async () => {
    // The first prefill worker takes 400 ms a prompt, the others none; each request asks for its
    // first token within 200 ms (set by a stage, as the SLO headers' would).
    const { client, proxy, prefill, decode } = await harness.cluster(
      'vllm',
      { prefill: [{ tokenIntervalMs: 400 }, {}, {}], decode: [{ tokens: 2 }, { tokens: 2 }, { tokens: 2 }] },
      {
        prefillPolicy: 'scored',
        decodePolicy: 'scored',
        // Load alone besides the filter: the same prompt every time would stay on one worker by its prefix.
        routing: { scorers: [{ name: 'load' }], filters: [{ name: 'slo-feasible' }] },
      },
    );
    proxy.addStage({
      name: 'slo',
      run: (request) => {
        (request as unknown as { input: RoutingInput }).input.serviceLevels = { ttftMs: 200 };
        return undefined;
      },
    });
    const ask = async () => {
      const stream = await client.completions.create({
        model: 'fake-model',
        prompt: 'x'.repeat(300),
        max_tokens: 2,
        stream: true,
      });
      for await (const _chunk of stream) {
        // Read to the end: the router times the stream's gaps.
      }
    };
    // Served in turn while nothing is predicted: five each, enough for each worker's own fit.
    for (let i = 0; i < 15; i++) await ask();
    const slow = prefill[0] as (typeof prefill)[number];
    expect(slow.requests).toHaveLength(5);
    for (let i = 0; i < 6; i++) await ask();
    expect(slow.requests).toHaveLength(5);
    expect(prefill.map((worker) => worker.requests.length)).toEqual([5, 8, 8]);
    // What the router learned: the slow worker's TTFT, and each decode worker's inter-token time.
    const latency = (proxy as unknown as { core: ProxyCore }).core.latency;
    expect(latency?.samples({ url: slow.url }).ttft).toBe(5);
    for (const worker of decode) expect(latency?.samples({ url: worker.url }).itl).toBe(7);
  });
});
