// A sidecar (`sidecar: { prefillFrom: 'header' }`) as a library user builds it: retries on the
// named prefill worker, SGLang's rendezvous, the routes that never disaggregate.
import OpenAI from 'openai';
import { request } from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import { createProxy, type ProxyOptions, type ProxyServer } from '../../src/server/proxy.js';
import type { FakeRequest, FakeWorkerOptions } from '../../src/testing/index.js';
import { recordingLogger } from '../support/async.js';
import { fakeWorkers } from '../support/http.js';

const fakes = fakeWorkers();
let proxies: ProxyServer[] = [];
afterEach(async () => {
  await Promise.all(proxies.map((proxy) => proxy.close({ gracePeriodMs: 0, drainDelayMs: 0 })));
  proxies = [];
});

async function sidecar(
  protocol: 'vllm' | 'sglang',
  prefillOptions: Partial<FakeWorkerOptions>,
  sidecarOptions: NonNullable<ProxyOptions['sidecar']> = {},
) {
  const prefill = await fakes.start({ role: 'prefill', protocol, ...prefillOptions });
  const decode = await fakes.start({ role: 'decode', protocol, tokens: 3 });
  const proxy = createProxy({
    connector: protocol,
    decode: [{ url: decode.url }],
    ...(protocol === 'sglang' ? { bootstrapPort: prefill.bootstrapPort } : {}),
    sidecar: { prefillFrom: 'header', prefillAllow: ['127.0.0.1'], ...sidecarOptions },
    retry: { initialBackoffMs: 1, maxBackoffMs: 1 },
    logger: recordingLogger().logger,
  });
  proxies.push(proxy);
  const url = await proxy.listen(0);
  const client = new OpenAI({
    baseURL: `${url}/v1`,
    apiKey: 'x',
    maxRetries: 0,
    defaultHeaders: { 'x-prefiller-host-port': new URL(prefill.url).host },
  });
  return { prefill, decode, url, client };
}

/** A prefill worker that answers 503 to its first `count` requests. */
const failingFirst = (count: number) => {
  let seen = 0;
  return { fault: (_request: FakeRequest) => (seen++ < count ? { type: 'status' as const, status: 503 } : undefined) };
};

describe('a sidecar', () => {
  it('retries a failed prefill on the worker the header named, as often as prefillMaxRetries says', async () => {
    const { client, prefill } = await sidecar('vllm', failingFirst(1), { prefillMaxRetries: 1 });
    const completion = await client.completions.create({ model: 'fake-model', prompt: 'Hi', max_tokens: 3 });
    expect(completion.choices[0]?.text).toBe('tok0 tok1 tok2 ');
    expect(prefill.requests).toHaveLength(2);
  });

  it('retries on the next prefill worker of a list the header named, in its order', async () => {
    const failing = await fakes.start({ role: 'prefill', protocol: 'vllm', fault: { type: 'status', status: 503 } });
    const { client, prefill } = await sidecar('vllm', {}, { prefillMaxRetries: 1 });
    const listed = `${new URL(failing.url).host},${new URL(prefill.url).host}`;
    const { data, response } = await client.completions
      .create({ model: 'fake-model', prompt: 'Hi', max_tokens: 3 }, { headers: { 'x-prefiller-host-port': listed } })
      .withResponse();
    expect(data.choices[0]?.text).toBe('tok0 tok1 tok2 ');
    expect(response.headers.get('x-disagg-prefill-worker')).toBe('prefill-target');
    expect([failing.requests.length, prefill.requests.length]).toEqual([1, 1]);
  });

  it("does not retry by default (llm-d's sidecar's default): the worker's failure reaches the client as a 502-class answer", async () => {
    const { client, prefill, decode } = await sidecar('vllm', failingFirst(1));
    const failure = await client.completions
      .create({ model: 'fake-model', prompt: 'Hi', max_tokens: 3 })
      .catch((e) => e);
    expect(failure).toBeInstanceOf(OpenAI.APIError);
    expect((failure as InstanceType<typeof OpenAI.APIError>).status).toBe(502);
    expect(prefill.requests).toHaveLength(1);
    expect(decode.requests.filter((call) => call.path === '/v1/completions')).toHaveLength(0);
  });

  it("runs SGLang's rendezvous with the named prefill worker at the sidecar's bootstrap port", async () => {
    const { client, prefill, decode } = await sidecar('sglang', {});
    const completion = await client.chat.completions.create({
      model: 'fake-model',
      messages: [{ role: 'user', content: 'Hi' }],
      max_tokens: 3,
    });
    expect(completion.choices[0]?.message.content).toBe('tok0 tok1 tok2 ');
    const [prefillBody, decodeBody] = [prefill.requests[0]?.body, decode.requests.at(-1)?.body] as Array<
      Record<string, unknown>
    >;
    expect(prefillBody).toMatchObject({ bootstrap_host: '127.0.0.1', bootstrap_port: prefill.bootstrapPort });
    expect(decodeBody?.bootstrap_room).toBe(prefillBody?.bootstrap_room);
  });

  it('passes a route that never disaggregates to the decode worker, whatever the header names', async () => {
    const { url, prefill, decode } = await sidecar('vllm', {});
    const response = await request(`${url}/v1/embeddings`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-prefiller-host-port': '169.254.169.254:80' },
      body: JSON.stringify({ model: 'fake-model', input: 'Hi' }),
    });
    expect(response.statusCode).toBe(200);
    await response.body.dump();
    expect(prefill.requests).toHaveLength(0);
    expect(decode.requests.some((call) => call.path === '/v1/embeddings')).toBe(true);
  });
});
