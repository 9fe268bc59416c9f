// The SGLang fake as a client of `disagg/testing` meets it: the rendezvous of both legs at the
// prefill worker's bootstrap server, what each leg answers, and what a leg left alone does.
import { request } from 'undici';
import { describe, expect, it } from 'vitest';
import type { FakeWorker } from '../../../src/testing/index.js';
import { eventually, fakeWorkers, postRaw } from '../../support/http.js';

const fakes = fakeWorkers();

async function post(worker: FakeWorker, body: object, headers: Record<string, string> = {}) {
  const answer = await postRaw(worker.url, '/v1/completions', JSON.stringify(body), headers);
  return { status: answer.status, text: answer.text, json: () => JSON.parse(answer.text) };
}

/** Both legs' body for `room` at `prefill`'s bootstrap server. */
const leg = (prefill: FakeWorker, room: number, extra: object = {}) => ({
  prompt: 'Hello there',
  max_tokens: 2,
  bootstrap_host: '127.0.0.1',
  bootstrap_port: prefill.bootstrapPort,
  bootstrap_room: room,
  ...extra,
});

describe('the SGLang fake', () => {
  it('prefill answers once decode took the room, as SGLang answers (completions logprobs without text offsets); the room is kept under the request id a router sent', async () => {
    const prefill = await fakes.start({ role: 'prefill', protocol: 'sglang' });
    const decode = await fakes.start({ role: 'decode', protocol: 'sglang', tokens: 2 });
    const body = leg(prefill, 7, { logprobs: 1 });
    const [first, second] = await Promise.all([
      post(prefill, body, { 'x-request-id': 'req-7' }),
      post(decode, body, { 'x-request-id': 'req-7' }),
    ]);
    expect(first.status).toBe(200);
    expect(first.json()).toMatchObject({ choices: [{ text: 'tok0 ', logprobs: { text_offset: [-1] } }] });
    expect(second.json()).toMatchObject({ choices: [{ text: 'tok0 tok1 ' }] });
    expect(prefill.ledger.claimed()).toMatchObject([{ key: '7', requestId: 'req-7' }]);
    expect(prefill.requests[0]).toMatchObject({ completed: true, aborted: false });
    // Without one, an id of its own.
    await Promise.all([post(prefill, leg(prefill, 8)), post(decode, leg(prefill, 8))]);
    expect(prefill.ledger.claimed()[1]?.requestId).toEqual(expect.any(String));
  });

  it('a prefill worker serves a request without bootstrap_room whole, waiting for no decode', async () => {
    const prefill = await fakes.start({ role: 'prefill', protocol: 'sglang', tokens: 3, bootstrapTimeoutMs: 50 });
    const answer = await post(prefill, { prompt: 'Hello', max_tokens: 3 });
    expect(answer.status).toBe(200);
    expect(answer.json()).toMatchObject({ choices: [{ text: 'tok0 tok1 tok2 ' }] });
    expect(prefill.ledger.all()).toEqual([]);
  });

  it('a prefill no decode meets fails once the bootstrap times out, naming its room; the KV is freed unclaimed', async () => {
    const prefill = await fakes.start({ role: 'prefill', protocol: 'sglang', bootstrapTimeoutMs: 20 });
    const answer = await post(prefill, leg(prefill, 7));
    expect(answer.status).toBe(500);
    expect(answer.json()).toMatchObject({
      error: { message: 'bootstrap room 7 timed out waiting for decode', code: 500 },
    });
    expect(prefill.ledger.stranded()).toMatchObject([{ key: '7' }]);
    fakes.leaveKv(prefill);
  });

  it('a decode whose room no prefill commits fails its transfer once the bootstrap server gives up, naming the room', async () => {
    const prefill = await fakes.start({ role: 'prefill', protocol: 'sglang', bootstrapTimeoutMs: 20 });
    const decode = await fakes.start({ role: 'decode', protocol: 'sglang' });
    const answer = await post(decode, leg(prefill, 5));
    expect(answer.status).toBe(500);
    expect(answer.text).toContain('KV transfer failed');
    expect(answer.text).toContain('no prefill committed room 5');
    expect(prefill.ledger.all()).toEqual([]);
  });

  it('a prefill that fails after the bootstrap answers 500 (KV transfer aborted); decode had taken the room', async () => {
    const prefill = await fakes.start({ role: 'prefill', protocol: 'sglang', fault: { type: 'late-failure' } });
    const decode = await fakes.start({ role: 'decode', protocol: 'sglang', tokens: 2 });
    const [first] = await Promise.all([post(prefill, leg(prefill, 7)), post(decode, leg(prefill, 7))]);
    expect(first.status).toBe(500);
    expect(first.json()).toMatchObject({ error: { message: 'KV transfer aborted after the bootstrap', code: 500 } });
    expect(prefill.ledger.claimed()).toMatchObject([{ key: '7' }]);
  });

  it('a prefill aborted while it computes commits nothing', async () => {
    const prefill = await fakes.start({ role: 'prefill', protocol: 'sglang', tokenIntervalMs: 200, tokens: 1 });
    const controller = new AbortController();
    const aborted = request(`${prefill.url}/v1/completions`, {
      method: 'POST',
      body: JSON.stringify(leg(prefill, 7)),
      signal: controller.signal,
    }).catch(() => 'aborted');
    await eventually(() => prefill.requests.length === 1, 'the prefill arrived');
    controller.abort();
    expect(await aborted).toBe('aborted');
    await eventually(() => prefill.requests[0]?.aborted === true, 'the worker saw the abort');
    // A request after it, timed as long, ends after the aborted one finished computing.
    expect((await post(prefill, { prompt: 'Hello', max_tokens: 1 })).status).toBe(200);
    expect(prefill.ledger.all()).toEqual([]);
  });

  it("refuses token ids on a streamed chat as SGLang's serving_chat does (a 400); completions and whole chats take them", async () => {
    const worker = await fakes.start({ role: 'decode', protocol: 'sglang', tokens: 2 });
    const chat = { model: 'fake-model', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 };
    const streamedChat = await postRaw(
      worker.url,
      '/v1/chat/completions',
      JSON.stringify({ ...chat, stream: true, return_token_ids: true }),
    );
    expect(streamedChat.status).toBe(400);
    expect(streamedChat.text).toContain('return_token_ids is not supported with streaming on /v1/chat/completions');
    const wholeChat = await postRaw(
      worker.url,
      '/v1/chat/completions',
      JSON.stringify({ ...chat, return_token_ids: true }),
    );
    expect(wholeChat.status).toBe(200);
    expect(JSON.parse(wholeChat.text)).toMatchObject({ choices: [{ token_ids: [2000, 2001] }] });
    const streamedWithout = await postRaw(
      worker.url,
      '/v1/chat/completions',
      JSON.stringify({ ...chat, stream: true }),
    );
    expect(streamedWithout.status).toBe(200);
    const streamedCompletion = await postRaw(
      worker.url,
      '/v1/completions',
      JSON.stringify({ model: 'fake-model', prompt: 'hi', max_tokens: 2, stream: true, return_token_ids: true }),
    );
    expect(streamedCompletion.status).toBe(200);
    expect(streamedCompletion.text).toContain('"token_ids":[2000]');
    const streamedFalse = await postRaw(
      worker.url,
      '/v1/chat/completions',
      JSON.stringify({ ...chat, stream: true, return_token_ids: false }),
    );
    expect(streamedFalse.status).toBe(200);
  });
});
