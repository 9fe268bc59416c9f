// The vLLM fake as a client of `disagg/testing` meets it: the body checks vLLM makes as it reads
// a request, the prefill answer's kv_transfer_params, and which decode calls take KV.
import { describe, expect, it } from 'vitest';
import type { FakeWorker } from '../../../src/testing/index.js';
import { fakeWorkers, postRaw } from '../../support/http.js';

const fakes = fakeWorkers();

async function post(worker: FakeWorker, body: object, headers: Record<string, string> = {}) {
  const answer = await postRaw(worker.url, '/v1/completions', JSON.stringify(body), headers);
  return { status: answer.status, text: answer.text, json: () => JSON.parse(answer.text) };
}

const prefillCall = { prompt: 'Hello', max_tokens: 1, kv_transfer_params: { do_remote_decode: true } };

describe('the vLLM fake', () => {
  it.each([
    [{ prompt_logprobs: 1, stream: true }, 400],
    [{ prompt_logprobs: -1, stream: true }, 400],
    [{ prompt_logprobs: 0, stream: true }, 200],
    [{ prompt_logprobs: 1, stream: false }, 200],
    [{ prompt_logprobs: 1 }, 200],
    [{ stream: true }, 200],
  ])(
    'prompt logprobs are refused only when streamed and asked for (above 0, or -1 for all): %j',
    async (extra, status) => {
      const worker = await fakes.start({ role: 'decode', protocol: 'vllm', tokens: 2 });
      const answer = await post(worker, { prompt: 'Hello', max_tokens: 2, ...extra });
      expect(answer.status).toBe(status);
      if (status === 400) {
        expect(answer.json()).toMatchObject({
          error: { message: '`prompt_logprobs` are not available when `stream=True`.', code: 400 },
        });
      }
    },
  );

  it('a prefill call answers the handoff of its blocks (kv_transfer_params), under the request id a router sent', async () => {
    const prefill = await fakes.start({ role: 'prefill', protocol: 'vllm' });
    const answer = await post(prefill, prefillCall, { 'x-request-id': 'req-7' });
    expect(answer.status).toBe(200);
    expect(answer.json().kv_transfer_params).toEqual({
      do_remote_prefill: true,
      do_remote_decode: false,
      remote_engine_id: expect.any(String),
      remote_block_ids: [0, 1],
      remote_host: '127.0.0.1',
      remote_port: prefill.port,
      remote_request_id: 'req-7',
      tp_size: 1,
    });
    expect(prefill.ledger.outstanding()).toMatchObject([{ requestId: 'req-7' }]);
    expect(prefill.requests[0]).toMatchObject({ completed: true, aborted: false });
    // Without one, a fresh id of its own.
    const fresh = (await post(prefill, prefillCall)).json().kv_transfer_params.remote_request_id;
    expect(fresh).toEqual(expect.any(String));
    expect(fresh).not.toBe('req-7');
    fakes.leaveKv(prefill);
  });

  it('a prefill the engine aborted answers whole, completed, naming no handoff', async () => {
    const prefill = await fakes.start({ role: 'prefill', protocol: 'vllm', answer: { finishReason: 'abort' } });
    const answer = await post(prefill, prefillCall);
    expect(answer.json()).toMatchObject({ choices: [{ finish_reason: 'abort' }] });
    expect(prefill.requests[0]).toMatchObject({ completed: true, aborted: false });
  });

  it('a prefill that fails after computing answers 500 and commits nothing', async () => {
    const prefill = await fakes.start({ role: 'prefill', protocol: 'vllm', fault: { type: 'late-failure' } });
    const answer = await post(prefill, prefillCall);
    expect(answer.status).toBe(500);
    expect(answer.json()).toMatchObject({ error: { message: 'prefill failed after computing', code: 500 } });
    expect(prefill.ledger.all()).toEqual([]);
  });

  it('a prefill worker serves a request without kv_transfer_params whole, holding nothing', async () => {
    const prefill = await fakes.start({ role: 'prefill', protocol: 'vllm', tokens: 3 });
    const answer = await post(prefill, { prompt: 'Hello', max_tokens: 3 });
    expect(answer.status).toBe(200);
    expect(answer.json()).toMatchObject({ choices: [{ text: 'tok0 tok1 tok2 ' }] });
    expect(answer.json().kv_transfer_params).toBeUndefined();
    expect(prefill.ledger.all()).toEqual([]);
  });

  it('a decode call takes KV only when its kv_transfer_params say do_remote_prefill', async () => {
    const prefill = await fakes.start({ role: 'prefill', protocol: 'vllm' });
    const decode = await fakes.start({ role: 'decode', protocol: 'vllm', tokens: 2 });
    const params = (await post(prefill, prefillCall)).json().kv_transfer_params;
    const notRemote = await post(decode, {
      prompt: 'Hello',
      max_tokens: 2,
      kv_transfer_params: { ...params, do_remote_prefill: false },
    });
    expect(notRemote).toMatchObject({ status: 200, text: expect.stringContaining('tok0 tok1') });
    expect(decode.requests[0]?.kv).toBeUndefined();
    expect(prefill.ledger.outstanding()).toHaveLength(1);
    expect((await post(decode, { prompt: 'Hello', max_tokens: 2, kv_transfer_params: params })).status).toBe(200);
    expect(decode.requests[1]?.kv).toBe('taken');
    expect(prefill.ledger.claimed()).toHaveLength(1);
  });

  it('a transfer that fails says why in its error (blocks never held there)', async () => {
    const prefill = await fakes.start({ role: 'prefill', protocol: 'vllm' });
    const decode = await fakes.start({ role: 'decode', protocol: 'vllm' });
    const params = (await post(prefill, prefillCall)).json().kv_transfer_params;
    const failed = await post(decode, { prompt: 'Hello', kv_transfer_params: { ...params, remote_block_ids: [7, 8] } });
    expect(failed.status).toBe(500);
    expect(failed.text).toContain(`no KV was ever held for ${String(params.remote_engine_id)}/7,8`);
    fakes.leaveKv(prefill);
  });

  it('with a served model, a request naming it or none is served; one naming another is a 404 naming it', async () => {
    const worker = await fakes.start({ role: 'decode', protocol: 'vllm', model: 'served', tokens: 1 });
    expect((await post(worker, { model: 'served', prompt: 'Hello' })).status).toBe(200);
    expect((await post(worker, { prompt: 'Hello' })).status).toBe(200);
    const other = await post(worker, { model: 'other', prompt: 'Hello' });
    expect(other.status).toBe(404);
    expect(other.json()).toMatchObject({ error: { message: 'The model `other` does not exist.', code: 404 } });
  });
});
