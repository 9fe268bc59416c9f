import { describe, expect, it } from 'vitest';
import { sglangBootstrap, trtllmContextFirst, vllmNixl } from '../../src/engines/registry.js';
import { earlyBootstrap, elementsOf } from '../../src/flow/connectors.js';
import { UnsupportedRequestError } from '../../src/flow/request-shaping.js';
import { Annotated } from '../../src/protocol/annotated.js';
import { LLMEngineOutput } from '../../src/protocol/llm-engine-output.js';
import { Controller } from '../../src/runtime/controller.js';
import { collect, ScriptedSource } from '../support/async.js';
import { decodeTokens, engine, runFlow } from '../support/flow.js';

describe('connectors over HTTP engines', () => {
  it('earlyBootstrap streams its prefill (without stream_options), so that the rendezvous arrives while it runs', () => {
    const body = earlyBootstrap.prefillBody({
      model: 'm',
      prompt: 'p',
      stream: true,
      stream_options: { include_usage: true },
    });
    expect(body.stream).toBe(true);
    expect(body).not.toHaveProperty('stream_options');
    expect(body.max_tokens).toBe(1);
  });

  it("TensorRT-LLM bodies carry only the client's fields and the handoff (its server refuses any other)", () => {
    const client = { model: 'm', prompt: 'p', max_tokens: 64, stream: true, stream_options: { include_usage: true } };
    expect(trtllmContextFirst.prefillBody(client)).toEqual({
      model: 'm',
      prompt: 'p',
      max_tokens: 64,
      stream: false,
      disaggregated_params: { request_type: 'context_only' },
    });
    const bare = trtllmContextFirst.prefillBody({ model: 'm', prompt: 'p' });
    expect(Object.keys(bare).sort()).toEqual(['disaggregated_params', 'model', 'prompt']);
    const params = { request_type: 'context_only', ctx_request_id: 3, first_gen_tokens: [1] };
    expect(trtllmContextFirst.decodeBody({ model: 'm', prompt: 'p' }, { kind: 'params', params })).toEqual({
      model: 'm',
      prompt: 'p',
      disaggregated_params: { ...params, request_type: 'generation_only' },
    });
  });

  it('SGLang: a batch has a room per prompt on both legs; prefill computes one sample', () => {
    const bootstrap = { bootstrap_host: ['h', 'h'], bootstrap_port: [1, 1], bootstrap_room: [5n, 6n] };
    expect(sglangBootstrap.prefillBody({ model: 'm', prompt: ['p', 'q'] }, bootstrap)).toMatchObject({
      n: 1,
      ...bootstrap,
    });
  });

  it('SGLang refuses more than one sample per prompt, naming the field: its samples would share one room', () => {
    expect(sglangBootstrap.refuse?.({ prompt: 'p', n: 2 })).toEqual({
      param: 'n',
      message:
        "n > 1 is not supported by SGLang's disaggregation: SGLang sends every sample of a prompt with the prompt's one bootstrap room, so their KV transfers collide; send 2 requests of one sample each",
    });
    expect(sglangBootstrap.refuse?.({ text: ['a', 'b'], sampling_params: { n: 3 } })).toMatchObject({
      param: 'sampling_params.n',
    });
    expect(sglangBootstrap.refuse?.({ text: ['a'], sampling_params: [{ n: 2 }] })).toMatchObject({
      param: 'sampling_params.n',
    });
    for (const fine of [
      { prompt: 'p' },
      { prompt: 'p', n: 1 },
      { text: 'a', sampling_params: { max_new_tokens: 3 } },
    ]) {
      expect(sglangBootstrap.refuse?.(fine)).toBeUndefined();
    }
  });

  it("counts the elements of a request: prompts times samples, n at the top or SGLang's sampling_params.n", () => {
    expect(elementsOf({ prompt: 'p' })).toBe(1);
    expect(elementsOf({ prompt: 'p', n: 3 })).toBe(3);
    expect(elementsOf({ prompt: ['a', 'b'], n: 2 })).toBe(4);
    expect(elementsOf({ prompt: [1, 2, 3] })).toBe(1); // token ids of one prompt
    expect(elementsOf({ prompt: [[1], [2]] })).toBe(2);
    expect(elementsOf({ text: ['a', 'b', 'c'] })).toBe(3);
    expect(elementsOf({ text: ['a', 'b'], sampling_params: { n: 3 } })).toBe(6);
    expect(elementsOf({ text: 'a', sampling_params: [{ n: 2 }] })).toBe(2);
    expect(elementsOf({ input_ids: [[1], [2]], sampling_params: { temperature: 0 } })).toBe(2);
  });

  it.each([
    [vllmNixl, { n: 2 }, 'n'],
    [vllmNixl, { best_of: 2 }, 'best_of'],
    [vllmNixl, { prompt: ['a', 'b'] }, 'prompt'],
    [trtllmContextFirst, { n: 4 }, 'n'],
    [sglangBootstrap, { n: 2 }, 'n'],
  ])('%o refuses what its handoff cannot carry, naming the field, before any leg', async (connector, extra, param) => {
    const prefill = engine(() => new ScriptedSource([]));
    const failure = await runFlow({
      connector,
      prefill: prefill.run,
      request: { model: 'm', prompt: 'p', ...extra },
    }).catch((error: unknown) => error);
    expect(UnsupportedRequestError.is(failure)).toBe(true);
    expect(failure).toMatchObject({ param, code: 'DISAGG_UNSUPPORTED_REQUEST' });
    expect(prefill.calls).toHaveLength(0);
  });

  it('SGLang with a batch of two prompts: a list of rooms on both legs, each congruent to the DP rank', async () => {
    const prefill = engine(() => new ScriptedSource([Annotated.fromData(LLMEngineOutput.length())]).end());
    const decode = decodeTokens();
    const stream = await runFlow({
      request: { model: 'm', prompt: ['p', 'q'] },
      context: new Controller(),
      prefill: prefill.run,
      decode: decode.run,
      connector: sglangBootstrap,
      prefillWorker: { bootstrapHost: 'h', bootstrapPort: 8998, dpRank: 1, dpSize: 3 },
    });
    await collect(stream);
    const rooms = decode.calls[0]?.body.bootstrap_room as bigint[];
    expect(rooms).toHaveLength(2);
    expect(prefill.calls[0]?.body.bootstrap_room).toEqual(rooms);
    expect(rooms.map((room) => room % 3n)).toEqual([1n, 1n]);
    expect(decode.calls[0]?.body).toMatchObject({ bootstrap_host: ['h', 'h'], bootstrap_port: [8998, 8998] });
  });

  it('SGLang: a prefill worker with dpSize but no dpRank is refused, not sent to rank 0', async () => {
    await expect(
      runFlow({
        connector: sglangBootstrap,
        prefillWorker: { bootstrapHost: 'h', bootstrapPort: 8998, dpSize: 4 },
      }),
    ).rejects.toThrow('has dpSize 4 but no dpRank');
  });
});

describe('connectors, by name and refusal', () => {
  it('each is named as the reference names it, and says which engine refuses what', () => {
    expect([vllmNixl, trtllmContextFirst, sglangBootstrap, earlyBootstrap].map((c) => [c.name, c.family])).toEqual([
      ['vllm-nixl', 'sequential'],
      ['trtllm-context-first', 'sequential'],
      ['sglang-bootstrap', 'concurrent'],
      ['early-bootstrap', 'early'],
    ]);
    expect(vllmNixl.refuse?.({ prompt: 'p', n: 2 })).toEqual({
      param: 'n',
      message: 'n > 1 is not supported by the vLLM NIXL handoff: each choice would need KV of its own',
    });
    expect(trtllmContextFirst.refuse?.({ prompt: 'p', best_of: 3 })).toEqual({
      param: 'best_of',
      message: 'best_of > 1 is not supported by the TensorRT-LLM handoff',
    });
    expect(vllmNixl.refuse?.({ prompt: ['a', 'b'] })).toEqual({
      param: 'prompt',
      message: 'a batch of prompts is not supported by the vLLM NIXL handoff: send one prompt per request',
    });
    for (const fine of [
      { prompt: 'p', n: 1 },
      { prompt: 'p', best_of: 1 },
      { prompt: ['one'] },
      { prompt: [] },
      { prompt: 'p', n: '2' },
    ]) {
      expect(vllmNixl.refuse?.(fine), JSON.stringify(fine)).toBeUndefined();
    }
  });

  it('elements: n of 1 or less, or not a number, is one; an empty batch is one prompt', () => {
    expect(elementsOf({ prompt: 'p', n: 1 })).toBe(1);
    expect(elementsOf({ prompt: 'p', n: 0 })).toBe(1);
    expect(elementsOf({ prompt: 'p', n: '3' })).toBe(1);
    expect(elementsOf({ prompt: [] })).toBe(1);
    expect(elementsOf({ input_ids: [[1], [2], [3]] })).toBe(3);
  });

  it('a handoff of the wrong kind is a TypeError naming the connector', () => {
    expect(() => vllmNixl.decodeBody({ prompt: 'p' }, { kind: 'bootstrap', bootstrap: {} as never })).toThrow(
      'The vllm-nixl connector hands off by parameters, not by a rendezvous',
    );
    expect(() => trtllmContextFirst.decodeBody({ prompt: 'p' }, { kind: 'bootstrap', bootstrap: {} as never })).toThrow(
      'The trtllm-context-first connector hands off by parameters',
    );
    expect(() => sglangBootstrap.decodeBody({ prompt: 'p' }, { kind: 'params', params: {} })).toThrow(
      'The sglang-bootstrap connector hands off by a rendezvous, not by parameters',
    );
    expect(() => sglangBootstrap.prefillBody({ prompt: 'p' })).toThrow(
      'The sglang-bootstrap connector needs the rendezvou',
    );
  });
});
