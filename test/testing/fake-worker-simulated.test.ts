// Fake workers timed by a simulated engine (`simulated`): the same HTTP protocols, their answers
// at the engine's pace, their /metrics its queues. Virtual time runs far faster than the wall;
// every assertion is on order, counts and the engine's own clock, none on the wall's.
import { request } from 'undici';
import { describe, expect, it, vi } from 'vitest';
import { fakePromptTokenIds } from '../../src/fakes/fake-kv-cache.js';
import type { TokenPace } from '../../src/fakes/fake-simulation.js';
import type { EngineProfile } from '../../src/simulation/profile-types.js';
import { SimEngine } from '../../src/simulation/sim-engine.js';
import { tokenBlocks } from '../../src/simulation/token-blocks.js';
import { VirtualClock } from '../../src/simulation/virtual-clock.js';
import type { FakeWorker } from '../../src/testing/index.js';
import { ARITHMETIC_PROFILE } from '../simulation/sim-fixtures.js';
import { eventuallyAsync, fakeWorkers } from '../support/http.js';

const fakes = fakeWorkers();
const ids = (n: number, from: number) => Array.from({ length: n }, (_, i) => from + i);

/** The pace of the first answer a worker's engine gives, once it gives one. */
function firstPace(worker: FakeWorker): () => TokenPace | undefined {
  const spy = vi.spyOn(worker.simulation as NonNullable<FakeWorker['simulation']>, 'generate');
  return () => spy.mock.results[0]?.value as TokenPace | undefined;
}

/** The events of a stream, as its client reads them, each with what the engine had produced by then. */
async function streamed(url: string, body: object, pace: () => TokenPace | undefined) {
  const answer = await request(`${url}/v1/chat/completions`, { method: 'POST', body: JSON.stringify(body) });
  expect(answer.statusCode).toBe(200);
  const events: Array<{ data: string; produced: number }> = [];
  let buffer = '';
  for await (const chunk of answer.body) {
    buffer += chunk.toString();
    let end = buffer.indexOf('\n\n');
    while (end !== -1) {
      events.push({ data: buffer.slice(6, end), produced: pace()?.times.length ?? 0 });
      buffer = buffer.slice(end + 2);
      end = buffer.indexOf('\n\n');
    }
  }
  return events;
}

/**
 * A decode worker that runs one sequence at a time, and three streams on it long enough to
 * stay (2,000 steps of 10 ms): one running, two waiting, until `controller` aborts them.
 */
async function threeLongStreams() {
  const profile: EngineProfile = { ...ARITHMETIC_PROFILE, maxRunning: 1 };
  const worker = await fakes.start({ role: 'decode', protocol: 'vllm', simulated: { profile, speedup: 10 } });
  const controller = new AbortController();
  const calls = [1, 2, 3].map((i) =>
    request(`${worker.url}/v1/completions`, {
      method: 'POST',
      body: JSON.stringify({ prompt: ids(100, i * 1000), max_tokens: 2000, stream: true }),
      signal: controller.signal,
    }).catch(() => undefined),
  );
  return { worker, controller, calls };
}

describe('a simulated fake worker answers at its engine’s pace', () => {
  it('a chat stream’s tokens come one per engine step, at the times the engine gives on a virtual clock', async () => {
    const worker = await fakes.start({
      role: 'decode',
      protocol: 'vllm',
      simulated: { profile: ARITHMETIC_PROFILE, speedup: 1000 },
    });
    const handed = firstPace(worker);
    const body = {
      model: 'fake-model',
      messages: [{ role: 'user', content: 'Why is the sky blue? '.repeat(200) }],
      max_tokens: 5,
      stream: true,
    };
    const events = await streamed(worker.url, body, handed);
    const contents = events.filter((event) => event.data.includes('"content":"tok'));
    expect(contents.map((event) => JSON.parse(event.data).choices[0].delta.content)).toEqual(
      ids(5, 0).map((i) => `tok${i} `),
    );
    // No chunk before its token: the k-th came once the engine had made k.
    for (const [k, event] of contents.entries()) expect(event.produced).toBeGreaterThanOrEqual(k + 1);
    expect(events.at(-1)?.data).toBe('[DONE]');
    // The same job on a virtual clock: its tokens at the same times from its start.
    const pace = handed() as TokenPace;
    const clock = new VirtualClock();
    const engine = new SimEngine({ profile: ARITHMETIC_PROFILE, clock });
    const tokens = fakePromptTokenIds(body, '/v1/chat/completions');
    const expected: number[] = [];
    engine.submit(
      { blocks: tokenBlocks(tokens), inputTokens: tokens.length, outputTokens: 5, kind: 'whole' },
      { token: (at) => expected.push(at) },
    );
    clock.run();
    expect(pace.times.map((at) => at - pace.startedAt)).toEqual(expected.map((at) => expect.closeTo(at, 6)));
  });

  it('/metrics reports the engine’s queue: past its running limit, requests wait', async () => {
    const { worker, controller, calls } = await threeLongStreams();
    const metrics = async () => (await (await request(`${worker.url}/metrics`)).body.text()) as string;
    await eventuallyAsync(
      async () => (await metrics()).includes('vllm:num_requests_waiting{model_name="fake-model"} 2'),
      'two requests waiting behind the running one',
    );
    const text = await metrics();
    const load = worker.simulation?.load();
    expect(load).toMatchObject({ running: 1, waiting: 2 });
    expect(text).toContain('vllm:num_requests_running{model_name="fake-model"} 1');
    // The running answer takes a block every 16 tokens: its usage only grows while it runs.
    const usage = Number(/vllm:kv_cache_usage_perc\{model_name="fake-model"\} (\S+)/.exec(text)?.[1]);
    expect(usage).toBeGreaterThan(0);
    expect(usage).toBeLessThanOrEqual(load?.kvUsage as number);
    controller.abort();
    await Promise.all(calls);
  });

  it('clients that leave end their jobs on the engine, as vLLM aborts them: its queues empty, its blocks given back', async () => {
    const { worker, controller, calls } = await threeLongStreams();
    const engine = (worker.simulation as NonNullable<FakeWorker['simulation']>).engine;
    await eventuallyAsync(async () => engine.jobs === 3, 'three jobs on the engine');
    controller.abort();
    await Promise.all(calls);
    await eventuallyAsync(async () => engine.jobs === 0, 'every job ended once its client left');
    expect(engine.load()).toMatchObject({ waiting: 0, running: 0 });
    expect(engine.kv.privateUnits).toBe(0);
    expect([...engine.kv.nodes()].every((node) => node.refs === 0)).toBe(true);
  });

  it('SGLang’s names: its /metrics reads the same queues', async () => {
    const worker = await fakes.start({
      role: 'decode',
      protocol: 'sglang',
      simulated: { profile: { ...ARITHMETIC_PROFILE, maxRunning: 1 }, speedup: 10 },
    });
    const controller = new AbortController();
    const calls = [1, 2].map((i) =>
      request(`${worker.url}/generate`, {
        method: 'POST',
        body: JSON.stringify({
          input_ids: ids(100, i * 1000),
          sampling_params: { max_new_tokens: 2000 },
          stream: true,
        }),
        signal: controller.signal,
      }).catch(() => undefined),
    );
    await eventuallyAsync(
      async () => (await (await request(`${worker.url}/metrics`)).body.text()).includes('sglang:num_queue_reqs'),
      'its metrics',
    );
    await eventuallyAsync(
      async () =>
        /sglang:num_queue_reqs\{model_name="fake-model"\} 1\n/.test(
          await (await request(`${worker.url}/metrics`)).body.text(),
        ),
      'one request queued behind the running one',
    );
    controller.abort();
    await Promise.all(calls);
  });

  it('/v1/models reports the profile’s context, and a request past it is refused as vLLM refuses it', async () => {
    const profile: EngineProfile = { ...ARITHMETIC_PROFILE, kvCacheTokens: 2048 };
    const worker = await fakes.start({ role: 'decode', protocol: 'vllm', simulated: { profile, speedup: 1000 } });
    expect(await (await request(`${worker.url}/v1/models`)).body.json()).toMatchObject({
      data: [{ max_model_len: 2048 }],
    });
    const answer = await request(`${worker.url}/v1/completions`, {
      method: 'POST',
      body: JSON.stringify({ prompt: ids(2000, 1), max_tokens: 100 }),
    });
    expect(answer.statusCode).toBe(400);
    expect(await answer.body.text()).toContain("This model's maximum context length is 2048 tokens");
  });
});

describe('simulated prefill and decode workers hand the KV over', () => {
  it('vLLM: decode receives the prompt’s KV over the link, the prefill’s blocks go once decode claimed them, and a repeated prompt is a prefix hit on both', async () => {
    const simulated = { profile: ARITHMETIC_PROFILE, speedup: 1000 };
    const prefill = await fakes.start({ role: 'prefill', protocol: 'vllm', simulated });
    const decode = await fakes.start({ role: 'decode', protocol: 'vllm', simulated });
    // Ids past the fakes' own answer ids (2,000-2,999), which they would read as a continuation.
    const prompt = ids(2048, 3000);
    const leg = async (url: string, body: object) => {
      const answer = await request(`${url}/v1/completions`, { method: 'POST', body: JSON.stringify(body) });
      return (await answer.body.json()) as {
        choices: Array<{ text: string }>;
        usage: { prompt_tokens_details: { cached_tokens: number } };
        kv_transfer_params: unknown;
      };
    };
    const run = async (tokens: number[]) => {
      const first = await leg(prefill.url, {
        prompt: tokens,
        max_tokens: 1,
        kv_transfer_params: { do_remote_decode: true },
      });
      const answer = await leg(decode.url, {
        prompt: tokens,
        max_tokens: 3,
        kv_transfer_params: first.kv_transfer_params,
      });
      return { first, answer };
    };
    const { first, answer } = await run(prompt);
    expect(answer.choices[0]?.text).toBe('tok0 tok1 tok2 ');
    expect(first.usage.prompt_tokens_details.cached_tokens).toBe(0);
    expect(prefill.ledger.claimed()).toHaveLength(1);
    // The whole prompt came over the link: nothing of it was cached on decode.
    expect(decode.simulation?.engine.counters.receivedBytes).toBe(2048 * ARITHMETIC_PROFILE.kvBytesPerToken);
    expect(decode.simulation?.engine.counters.decodedTokens).toBe(3);
    await eventuallyAsync(async () => prefill.simulation?.engine.jobs === 0, 'the prefill’s blocks released');
    const again = await run([...prompt, ...ids(100, 9000)]);
    expect(again.first.usage.prompt_tokens_details.cached_tokens).toBe(2048);
    // Decode held the prompt's blocks from the first time: only the new tokens came over.
    expect(decode.simulation?.engine.counters.receivedBytes).toBe((2048 + 100) * ARITHMETIC_PROFILE.kvBytesPerToken);
  });

  it('SGLang: both legs at once, decode taking the room’s KV over the link once prefill computed it; the prefill’s blocks go once decode claimed them', async () => {
    const simulated = { profile: ARITHMETIC_PROFILE, speedup: 1000 };
    const prefill = await fakes.start({ role: 'prefill', protocol: 'sglang', simulated });
    const decode = await fakes.start({ role: 'decode', protocol: 'sglang', simulated });
    const body = {
      input_ids: ids(1500, 3000),
      sampling_params: { max_new_tokens: 3 },
      bootstrap_host: '127.0.0.1',
      bootstrap_port: prefill.bootstrapPort,
      bootstrap_room: 11,
    };
    const [first, answer] = await Promise.all(
      [prefill, decode].map(async (worker) =>
        (await request(`${worker.url}/generate`, { method: 'POST', body: JSON.stringify(body) })).body.json(),
      ),
    );
    expect(first).toMatchObject({ meta_info: { completion_tokens: 1 } });
    expect(prefill.simulation?.engine.counters.computedTokens).toBe(1500);
    expect((answer as { text: string }).text).toBe('tok0 tok1 tok2 ');
    expect(prefill.ledger.claimed().map((handoff) => handoff.key)).toEqual(['11']);
    expect(decode.simulation?.engine.counters.receivedBytes).toBe(1500 * ARITHMETIC_PROFILE.kvBytesPerToken);
    await eventuallyAsync(async () => prefill.simulation?.engine.jobs === 0, 'the prefill’s blocks released');
  });
});
