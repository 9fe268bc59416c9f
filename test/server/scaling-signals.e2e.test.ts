// The signals to size the fleet by, read from /metrics while traffic runs through fake workers:
// the stage that is slow is the saturated one, and a decode that cannot take its KV yet leaves
// handoffs outstanding and aging on the prefill side.
import { afterEach, describe, expect, it } from 'vitest';
import { createProxy, type ProxyServer } from '../../src/server/proxy.js';
import { recordingLogger } from '../support/async.js';
import { eventuallyAsync, fakeWorkers } from '../support/http.js';

const fakes = fakeWorkers();
let proxy: ProxyServer | undefined;
afterEach(async () => {
  await proxy?.close({ gracePeriodMs: 0, drainDelayMs: 0 });
  proxy = undefined;
});

/** A series' value in a Prometheus text exposition; undefined when absent. */
function sample(text: string, series: string): number | undefined {
  for (const line of text.split('\n')) {
    if (line.startsWith(`${series} `)) return Number(line.slice(series.length + 1));
  }
  return undefined;
}

/** Streams a chat request to its end; the prompt is long enough to be disaggregated. */
async function chat(url: string, words = 40): Promise<string> {
  const answer = await fetch(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({
      model: 'fake-model',
      messages: [{ role: 'user', content: 'word '.repeat(words) }],
      stream: true,
      stream_options: { include_usage: true },
    }),
  });
  return answer.text();
}

describe('the scaling signals', () => {
  it('a slow prefill: prefill is the saturated stage, its requests and prompt tokens in flight, no handoff outstanding', async () => {
    // Each prefill takes 3 s; decode answers at once.
    const prefill = await fakes.start({ role: 'prefill', protocol: 'vllm', tokenIntervalMs: 3000 });
    const decode = await fakes.start({ role: 'decode', protocol: 'vllm', tokens: 2 });
    proxy = createProxy({
      connector: 'vllm',
      prefill: [{ url: prefill.url }],
      decode: [{ url: decode.url }],
      scaling: { prefillRequests: 2, decodeRequests: 4 },
      logger: recordingLogger().logger,
      // Four prompts queue on the one prefill worker: prefill-busy would serve two on decode.
      routing: { deciders: [] },
    });
    const url = await proxy.listen(0, '127.0.0.1');
    const requests = Array.from({ length: 4 }, () => chat(url));
    let text = '';
    await eventuallyAsync(async () => {
      text = await (await fetch(`${url}/metrics`)).text();
      return sample(text, 'disagg_inflight_requests{pool="default",role="prefill"}') === 4;
    }, 'four prefills under way');
    expect(sample(text, 'disagg_stage_saturation{pool="default",stage="prefill"}')).toBe(2);
    expect(sample(text, 'disagg_stage_saturation{pool="default",stage="decode"}')).toBe(0);
    expect(sample(text, 'disagg_stage_saturation{pool="default",stage="effective"}')).toBe(2);
    expect(sample(text, 'disagg_saturation_workers{pool="default",stage="prefill",source="in-flight"}')).toBe(1);
    expect(sample(text, 'disagg_inflight_requests{pool="default",role="decode"}')).toBe(0);
    // Each prompt: a quarter of its routing text's characters.
    expect(sample(text, 'disagg_inflight_prompt_tokens{pool="default",role="prefill"}')).toBeGreaterThanOrEqual(4 * 50);
    expect(sample(text, 'disagg_handoffs_outstanding{pool="default"}') ?? 0).toBe(0);
    await Promise.all(requests);
    text = await (await fetch(`${url}/metrics`)).text();
    expect(sample(text, 'disagg_inflight_requests{pool="default",role="prefill"}')).toBe(0);
    expect(sample(text, 'disagg_inflight_prompt_tokens{pool="default",role="prefill"}')).toBe(0);
    expect(sample(text, 'disagg_stage_saturation{pool="default",stage="prefill"}')).toBe(0);
    expect(sample(text, 'disagg_decisions_total{pool="default",decision="disaggregated",reason="none"}')).toBe(4);
    // Decode took each KV as soon as it was handed over.
    expect(sample(text, 'disagg_handoff_age_seconds_count{pool="default",end="claimed"}')).toBe(4);
    expect(sample(text, 'disagg_handoff_age_seconds_bucket{le="1",pool="default",end="claimed"}')).toBe(4);
  }, 30_000);

  it("a slow decode: decode is the saturated stage (its engine's queue), and handoffs wait on it and age", async () => {
    const prefill = await fakes.start({ role: 'prefill', protocol: 'vllm' });
    // One request at a time, a second each: the others wait in its queue without taking their KV.
    const decode = await fakes.start({
      role: 'decode',
      protocol: 'vllm',
      tokens: 2,
      tokenIntervalMs: 500,
      maxRunning: 1,
    });
    proxy = createProxy({
      connector: 'vllm',
      prefill: [{ url: prefill.url }],
      decode: [{ url: decode.url }],
      scaling: { saturationSource: 'engine', queueDepth: 1 },
      routing: { engineLoadIntervalMs: 20 },
      logger: recordingLogger().logger,
    });
    const url = await proxy.listen(0, '127.0.0.1');
    const requests = Array.from({ length: 3 }, () => chat(url));
    let text = '';
    await eventuallyAsync(async () => {
      text = await (await fetch(`${url}/metrics`)).text();
      return (sample(text, 'disagg_stage_saturation{pool="default",stage="decode"}') ?? 0) >= 1;
    }, "decode's queue read as saturated");
    expect(sample(text, 'disagg_saturation_workers{pool="default",stage="decode",source="engine"}')).toBe(1);
    expect(sample(text, 'disagg_stage_saturation{pool="default",stage="prefill"}')).toBe(0);
    expect(sample(text, 'disagg_stage_saturation{pool="default",stage="effective"}')).toBe(
      sample(text, 'disagg_stage_saturation{pool="default",stage="decode"}'),
    );
    expect(sample(text, 'disagg_inflight_requests{pool="default",role="decode"}')).toBe(3);
    expect(sample(text, 'disagg_inflight_requests{pool="default",role="prefill"}')).toBe(0);
    expect(sample(text, 'disagg_handoffs_outstanding{pool="default"}')).toBeGreaterThanOrEqual(1);
    await eventuallyAsync(async () => {
      text = await (await fetch(`${url}/metrics`)).text();
      return (sample(text, 'disagg_handoff_oldest_seconds{pool="default"}') ?? 0) > 0.5;
    }, 'a handoff older than half a second');
    await Promise.all(requests);
    text = await (await fetch(`${url}/metrics`)).text();
    expect(sample(text, 'disagg_handoffs_outstanding{pool="default"}')).toBe(0);
    expect(sample(text, 'disagg_handoff_oldest_seconds{pool="default"}')).toBe(0);
    expect(sample(text, 'disagg_handoff_age_seconds_count{pool="default",end="claimed"}')).toBe(3);
    // The last in the queue waited for both before it: past a second.
    expect(sample(text, 'disagg_handoff_age_seconds_bucket{le="1",pool="default",end="claimed"}')).toBeLessThan(3);
    expect(sample(text, 'disagg_output_sequence_tokens_count{pool="default"}')).toBe(3);
    expect(sample(text, 'disagg_output_sequence_tokens_sum{pool="default"}')).toBe(6);
  }, 30_000);

  it('each P/D decision is counted per pool with its reason: disaggregated, aggregated below a length, refused with no decode worker', async () => {
    const prefill = await fakes.start({ role: 'prefill', protocol: 'vllm' });
    const decode = await fakes.start({ role: 'decode', protocol: 'vllm', tokens: 2 });
    proxy = createProxy({
      connector: 'vllm',
      prefill: [{ url: prefill.url }],
      decode: [{ url: decode.url }],
      routing: { aggregateBelowChars: 100 },
      logger: recordingLogger().logger,
    });
    const url = await proxy.listen(0, '127.0.0.1');
    await chat(url, 40);
    await chat(url, 2);
    await chat(url, 2);
    proxy.decodeWorkers.setAvailable(proxy.decodeWorkers.workers[0] as { url: string }, false);
    await chat(url, 40);
    const text = await (await fetch(`${url}/metrics`)).text();
    expect(sample(text, 'disagg_decisions_total{pool="default",decision="disaggregated",reason="none"}')).toBe(1);
    expect(sample(text, 'disagg_decisions_total{pool="default",decision="aggregated",reason="short-prompt"}')).toBe(2);
    expect(sample(text, 'disagg_decisions_total{pool="default",decision="refused",reason="no-worker"}')).toBe(1);
    expect(sample(text, 'disagg_input_sequence_tokens_count{pool="default"}')).toBe(3);
    // With no decode worker in rotation the decode stage takes nothing more.
    expect(sample(text, 'disagg_stage_saturation{pool="default",stage="decode"}')).toBe(1);
  });
});
