// `disagg sidecar` as an operator runs it on a decode pod behind an endpoint picker (llm-d's,
// or disagg's own `disagg epp`): the built bin, fake vLLM workers, the `openai` client.
import OpenAI from 'openai';
import { request } from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import { serveBin } from '../support/bin.js';
import { fakeWorkers } from '../support/http.js';

const fakes = fakeWorkers();
const cleanups: Array<() => unknown> = [];
afterEach(async () => {
  await Promise.all(cleanups.splice(0).map((cleanup) => cleanup()));
});

/** A prefill worker elsewhere, a local decode worker, and a sidecar in front of the decode worker. */
async function sidecarPod(args: string[] = ['--prefill-allow', '127.0.0.0/8']) {
  const prefill = await fakes.start({ role: 'prefill', protocol: 'vllm' });
  const decode = await fakes.start({ role: 'decode', protocol: 'vllm', tokens: 4 });
  const sidecar = await serveBin(['--connector', 'vllm', '--decode', decode.url, ...args], {
    command: 'sidecar',
    cleanups,
  });
  const target = new URL(prefill.url).host;
  return { prefill, decode, sidecar, target };
}

describe('disagg sidecar', () => {
  it('runs the prefill leg where x-prefiller-host-port says, capped at one token, then decodes locally: the openai client reads the stream and no KV is left', async () => {
    const { prefill, decode, sidecar, target } = await sidecarPod();
    const client = new OpenAI({ baseURL: `${sidecar.url}/v1`, apiKey: 'x', maxRetries: 0 });
    const { data: stream, response } = await client.chat.completions
      .create(
        { model: 'fake-model', messages: [{ role: 'user', content: 'Hello' }], max_tokens: 4, stream: true },
        { headers: { 'x-prefiller-host-port': target, 'x-data-parallel-host-port': '10.9.9.9:8000' } },
      )
      .withResponse();
    // Named, never by its address.
    expect(response.headers.get('x-disagg-prefill-worker')).toBe('prefill-target');
    let text = '';
    for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? '';
    expect(text).toBe('tok0 tok1 tok2 tok3 ');
    expect(prefill.requests).toHaveLength(1);
    const prefillBody = prefill.requests[0]?.body as Record<string, unknown>;
    expect(prefillBody).toMatchObject({ max_tokens: 1, stream: false, kv_transfer_params: { do_remote_decode: true } });
    const decodeBody = decode.requests[0]?.body as Record<string, unknown>;
    expect(decodeBody).toMatchObject({ max_tokens: 4, stream: true, kv_transfer_params: { do_remote_prefill: true } });
    // The picker's headers are the sidecar's: no worker sees them.
    for (const call of [...prefill.requests, ...decode.requests]) {
      expect(
        Object.keys(call.headers).filter(
          (name) => name.startsWith('x-prefiller') || name.startsWith('x-data-parallel'),
        ),
      ).toEqual([]);
    }
  });

  it('refuses a prefill worker outside the allow-list with a 403 before any call', async () => {
    const { prefill, decode, sidecar } = await sidecarPod(['--prefill-allow', '10.0.0.0/8']);
    for (const named of [new URL(prefill.url).host, '169.254.169.254:80', 'metadata.internal:80', 'not an address']) {
      const response = await request(`${sidecar.url}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-prefiller-host-port': named },
        body: JSON.stringify({ model: 'fake-model', prompt: 'Hi', max_tokens: 2 }),
      });
      expect(response.statusCode).toBe(403);
      const body = (await response.body.json()) as { error: { type: string; message: string } };
      expect(body.error.type).toBe('permission_denied');
      expect(body.error.message).toMatch(/x-prefiller-host-port names/);
      // The refusal does not echo an address back.
      expect(body.error.message).not.toMatch(/127\.0\.0\.1|169\.254/);
    }
    expect(prefill.requests).toHaveLength(0);
    expect(decode.requests.filter((call) => call.path.startsWith('/v1/'))).toHaveLength(0);
  });

  it('serves a request without the header on the local decode worker alone', async () => {
    const { prefill, decode, sidecar } = await sidecarPod();
    const client = new OpenAI({ baseURL: `${sidecar.url}/v1`, apiKey: 'x', maxRetries: 0 });
    const { data, response } = await client.completions
      .create({ model: 'fake-model', prompt: 'Hi', max_tokens: 4 })
      .withResponse();
    expect(data.choices[0]?.text).toBe('tok0 tok1 tok2 tok3 ');
    expect(response.headers.get('x-disagg-strategy')).toBe('skipped-prefill');
    expect(prefill.requests).toHaveLength(0);
    expect(decode.requests.filter((call) => call.path === '/v1/completions')).toHaveLength(1);
  });

  it('takes a prefill worker it was given by address without an allow-list', async () => {
    const prefillFake = await fakes.start({ role: 'prefill', protocol: 'vllm' });
    const { sidecar, decode } = await sidecarPod(['--prefill', prefillFake.url]);
    const client = new OpenAI({ baseURL: `${sidecar.url}/v1`, apiKey: 'x', maxRetries: 0 });
    const { data, response } = await client.completions
      .create(
        { model: 'fake-model', prompt: 'Hi', max_tokens: 4 },
        { headers: { 'x-prefiller-host-port': new URL(prefillFake.url).host } },
      )
      .withResponse();
    expect(data.choices[0]?.text).toBe('tok0 tok1 tok2 tok3 ');
    expect(response.headers.get('x-disagg-prefill-worker')).toBe('prefill-0');
    expect(prefillFake.requests).toHaveLength(1);
    expect(decode.requests.filter((call) => call.path === '/v1/completions')).toHaveLength(1);
  });

  it('says in one line what an allow-list entry should look like, and that a sidecar needs one', async () => {
    await expect(
      serveBin(['--connector', 'vllm', '--decode', 'http://127.0.0.1:9', '--prefill-allow', '10.0.0.0/33'], {
        command: 'sidecar',
        cleanups,
      }),
    ).rejects.toThrow(
      /disagg sidecar: --prefill-allow \(sidecar\.prefillAllow\) has "10\.0\.0\.0\/33", which is not an address or a CIDR/,
    );
    await expect(
      serveBin(['--connector', 'vllm', '--decode', 'http://127.0.0.1:9'], { command: 'sidecar', cleanups }),
    ).rejects.toThrow(/disagg sidecar: --prefill-from header needs --prefill-allow/);
  });
});
