// The TensorRT-LLM fake as a client of `disagg/testing` meets it: the fields its OpenAI server
// takes per route, the context response with its handoff on the choice, and the generation
// server taking the KV that handoff names.
import { request } from 'undici';
import { describe, expect, it } from 'vitest';
import type { FakeWorker } from '../../../src/testing/index.js';
import { eventually, fakeWorkers, postRaw } from '../../support/http.js';

const fakes = fakeWorkers();

async function post(worker: FakeWorker, path: string, body: object, headers: Record<string, string> = {}) {
  const answer = await postRaw(worker.url, path, JSON.stringify(body), headers);
  return { status: answer.status, text: answer.text, json: () => JSON.parse(answer.text) };
}

const contextOnly = { disaggregated_params: { request_type: 'context_only' } };

/** The handoff a context response carries on its choice. */
async function contextOn(worker: FakeWorker, headers: Record<string, string> = {}) {
  const answer = await post(
    worker,
    '/v1/completions',
    { model: 'm', prompt: 'Tell me', max_tokens: 4, ...contextOnly },
    headers,
  );
  expect(answer.status).toBe(200);
  const body = answer.json() as { disaggregated_params?: unknown; choices: Array<Record<string, unknown>> };
  expect(body.disaggregated_params).toBeUndefined();
  return body.choices[0]?.disaggregated_params as Record<string, unknown>;
}

describe('the TensorRT-LLM fake', () => {
  it("takes every field its OpenAI server knows on each route (the client's fields and the handoff)", async () => {
    const worker = await fakes.start({ role: 'decode', protocol: 'trtllm', tokens: 2 });
    const common = {
      model: 'm',
      n: 1,
      stream: true,
      stream_options: { include_usage: true },
      stop: ['\n\n'],
      seed: 7,
      temperature: 0.5,
      top_p: 0.9,
      top_k: 40,
      presence_penalty: 0.1,
      frequency_penalty: 0.1,
      logit_bias: { '50256': -100 },
      user: 'u',
      max_tokens: 2,
      response_format: { type: 'text' },
      ignore_eos: false,
    };
    const completion = await post(worker, '/v1/completions', {
      ...common,
      prompt: 'Say',
      logprobs: 1,
      echo: false,
      best_of: 1,
      suffix: '.',
    });
    expect(completion).toMatchObject({ status: 200, text: expect.stringContaining('data: [DONE]') });
    const chat = await post(worker, '/v1/chat/completions', {
      ...common,
      messages: [{ role: 'user', content: 'Hi' }],
      max_completion_tokens: 2,
      logprobs: true,
      top_logprobs: 1,
      tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object' } } }],
      tool_choice: 'none',
      parallel_tool_calls: false,
    });
    expect(chat).toMatchObject({ status: 200, text: expect.stringContaining('data: [DONE]') });
  });

  it('refuses, as it reads the body, any field it does not know on that route: a 400 naming them all', async () => {
    const worker = await fakes.start({ role: 'decode', protocol: 'trtllm' });
    const completion = await post(worker, '/v1/completions', {
      prompt: 'Say',
      messages: [],
      kv_transfer_params: { do_remote_decode: true },
    });
    expect(completion.status).toBe(400);
    expect(completion.json()).toMatchObject({
      error: { message: '"messages", "kv_transfer_params": Extra inputs are not permitted', code: 400 },
    });
    const chat = await post(worker, '/v1/chat/completions', {
      messages: [{ role: 'user', content: 'Hi' }],
      echo: true,
    });
    expect(chat.status).toBe(400);
    expect(chat.json()).toMatchObject({ error: { message: '"echo": Extra inputs are not permitted' } });
    expect(worker.requests).toEqual([]);
  });

  it('a context_only request answers whole with the handoff on its choice, keeping the KV under the request id a router sent', async () => {
    const prefill = await fakes.start({ role: 'prefill', protocol: 'trtllm' });
    const params = await contextOn(prefill, { 'x-request-id': 'req-7' });
    expect(params).toEqual({
      request_type: 'context_only',
      first_gen_tokens: [1],
      ctx_request_id: expect.any(Number),
      encoded_opaque_state: 'b3BhcXVl',
      draft_tokens: null,
      ctx_info_endpoint: prefill.url,
    });
    expect(prefill.ledger.outstanding()).toEqual([
      expect.objectContaining({ key: `ctx-${String(params.ctx_request_id)}`, requestId: 'req-7' }),
    ]);
    expect(prefill.requests[0]).toMatchObject({ completed: true, aborted: false });
    // Without a request id, the ledger names the context request itself.
    const other = await contextOn(prefill);
    expect(prefill.ledger.all()[1]?.requestId).toBe(`ctx-${String(other.ctx_request_id)}`);
    fakes.leaveKv(prefill);
  });

  it('each context request gets its own ctx_request_id, a positive integer as the executor numbers them', async () => {
    const prefill = await fakes.start({ role: 'prefill', protocol: 'trtllm' });
    const ids = [(await contextOn(prefill)).ctx_request_id, (await contextOn(prefill)).ctx_request_id];
    for (const id of ids) expect(Number.isInteger(id) && (id as number) > 0, `ctx_request_id ${String(id)}`).toBe(true);
    expect(new Set(ids).size).toBe(2);
    fakes.leaveKv(prefill);
  });

  it('generation_only takes the KV its handoff names, once; a context request it never held fails the transfer', async () => {
    const prefill = await fakes.start({ role: 'prefill', protocol: 'trtllm' });
    const decode = await fakes.start({ role: 'decode', protocol: 'trtllm', tokens: 3 });
    const params = await contextOn(prefill);
    const generate = (handoff: Record<string, unknown>) =>
      post(decode, '/v1/completions', {
        prompt: 'Tell me',
        max_tokens: 3,
        disaggregated_params: { ...handoff, request_type: 'generation_only' },
      });
    const taken = await generate(params);
    expect(taken.status).toBe(200);
    expect(taken.json()).toMatchObject({ choices: [{ text: 'tok0 tok1 tok2 ' }] });
    expect(prefill.ledger.claimed()).toHaveLength(1);
    const unknown = await generate({ ...params, ctx_request_id: 999_999 });
    expect(unknown.status).toBe(500);
    expect(unknown.text).toContain('KV transfer failed');
    expect(unknown.text).toContain('no KV held for ctx-999999');
  });

  it('without disaggregated_params, either worker serves the request whole, as an aggregated one', async () => {
    for (const role of ['prefill', 'decode'] as const) {
      const worker = await fakes.start({ role, protocol: 'trtllm', tokens: 3 });
      const answer = await post(worker, '/v1/completions', { prompt: 'Say', max_tokens: 3 });
      expect(answer.status, role).toBe(200);
      expect(answer.json(), role).toMatchObject({ choices: [{ text: 'tok0 tok1 tok2 ', finish_reason: 'length' }] });
      expect(answer.json().choices[0].disaggregated_params, role).toBeUndefined();
      expect(worker.ledger.all(), role).toEqual([]);
    }
  });

  it('a context request aborted while it computes keeps no KV', async () => {
    const prefill = await fakes.start({ role: 'prefill', protocol: 'trtllm', tokenIntervalMs: 200, tokens: 1 });
    const controller = new AbortController();
    const aborted = request(`${prefill.url}/v1/completions`, {
      method: 'POST',
      body: JSON.stringify({ prompt: 'Tell me', ...contextOnly }),
      signal: controller.signal,
    }).catch(() => 'aborted');
    await eventually(() => prefill.requests.length === 1, 'the context request arrived');
    controller.abort();
    expect(await aborted).toBe('aborted');
    await eventually(() => prefill.requests[0]?.aborted === true, 'the worker saw the abort');
    // A request after it, timed as long, ends after the aborted one finished computing.
    expect((await post(prefill, '/v1/completions', { prompt: 'Say', max_tokens: 1 })).status).toBe(200);
    expect(prefill.ledger.all()).toEqual([]);
  });
});
