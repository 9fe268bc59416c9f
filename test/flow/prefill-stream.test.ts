import { describe, expect, it } from 'vitest';
import { classifyPrefill } from '../../src/flow/prefill-stream.js';
import { PrefillError } from '../../src/handoff/prefill-error.js';
import { Annotated } from '../../src/protocol/annotated.js';
import { LLMEngineOutput } from '../../src/protocol/llm-engine-output.js';
import { type Item, recordingLogger, ScriptedSource } from '../support/async.js';

const quiet = { logger: recordingLogger().logger };
const out = (data: Record<string, unknown>): Item => Annotated.fromData({ token_ids: [1], ...data });
const vllmParams = { remote_engine_id: 'e1', remote_block_ids: [1, 2], remote_host: '10.0.0.2', remote_port: 5600 };

async function failure(items: Item[]) {
  const source = new ScriptedSource(items).end();
  const error = await classifyPrefill(source, quiet).then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(PrefillError);
  return { error: error as PrefillError, source };
}

describe('classifyPrefill', () => {
  it("a sequential handoff: the params and the prefill leg's prompt_tokens_details", async () => {
    const usage = {
      prompt_tokens: 900,
      completion_tokens: 1,
      total_tokens: 901,
      prompt_tokens_details: { cached_tokens: 512 },
    };
    const first = out({ finish_reason: 'length', disaggregated_params: vllmParams, completion_usage: usage });
    const result = await classifyPrefill(new ScriptedSource([first]).end(), quiet);
    expect(result).toEqual({
      kind: 'handoff',
      params: vllmParams,
      output: first,
      promptTokensDetails: { cached_tokens: 512 },
    });
  });

  it('params that arrive on a later output (a streamed prefill) are found', async () => {
    const result = await classifyPrefill(
      new ScriptedSource([out({}), out({ finish_reason: 'length', disaggregated_params: vllmParams })]).end(),
      quiet,
    );
    expect(result).toMatchObject({ kind: 'handoff', params: vllmParams });
  });

  it('no output at all is a PrefillError', async () => {
    const { error } = await failure([]);
    expect(error.kind).toBe('prefill');
    expect(error.message).toBe('Prefill execution failed: Prefill router returned no output (stream ended)');
  });

  it('an error first item is a PrefillError with the worker text and the cause, and closes the stream', async () => {
    const cause = new Error('prefill worker 2 gone');
    const { error, source } = await failure([Annotated.fromError(cause), out({})]);
    expect(error.message).toBe(
      'Prefill execution failed: Prefill router returned error in output: prefill worker 2 gone',
    );
    expect(error.cause).toBe(cause);
    expect(source.closed).toBe(true);
  });

  it('an error item later in the stream fails it too', async () => {
    const { error } = await failure([out({ disaggregated_params: vllmParams }), Annotated.fromError('late')]);
    expect(error.message).toContain('returned error in output: late');
  });

  it('no disaggregated_params is a PrefillError of kind no_disaggregated_params', async () => {
    const { error } = await failure([out({ finish_reason: 'length' })]);
    expect(error.kind).toBe('no_disaggregated_params');
    expect(error.message).toBe('No disaggregated params in prefill response: no output carried disaggregated_params');
  });

  it('an output without data is a no_disaggregated_params error', async () => {
    const { error } = await failure([{ event: 'metrics' } as Item]);
    expect(error.kind).toBe('no_disaggregated_params');
  });

  it.each([
    ['a null ctx_request_id', { ctx_request_id: null, request_type: 'context_only' }],
    ['context_only without one', { request_type: 'context_only', first_gen_tokens: [5] }],
  ])('a TensorRT-LLM context response with %s fails before any decode', async (_, params) => {
    const { error } = await failure([out({ finish_reason: 'length', disaggregated_params: params })]);
    expect(error.kind).toBe('no_disaggregated_params');
    expect(error.message).toContain('ctx_request_id');
  });

  it('a TensorRT-LLM context response with its ctx_request_id hands off', async () => {
    const params = { ctx_request_id: 4242, request_type: 'context_only' };
    const result = await classifyPrefill(
      new ScriptedSource([out({ finish_reason: 'length', disaggregated_params: params })]).end(),
      quiet,
    );
    expect(result).toMatchObject({ kind: 'handoff', params });
  });

  it.each(['stop', 'eos'] as const)(
    'a first output finished by %s ends the request without decode, disaggregated_params stripped',
    async (reason) => {
      const source = new ScriptedSource([out({ finish_reason: reason, text: 'Hi', disaggregated_params: vllmParams })]);
      const result = await classifyPrefill(source, quiet);
      expect(result.kind).toBe('finished');
      expect(result.output.data).toEqual({ token_ids: [1], finish_reason: reason, text: 'Hi' });
      expect(source.closed).toBe(true);
    },
  );

  it('an early handoff: the bootstrap triple at once, the rest drained in the background', async () => {
    const room = '9223372036854775000'; // above 2^53: must stay exact
    const first = out({
      disaggregated_params: { bootstrap_host: '10.0.0.3', bootstrap_port: 8998, bootstrap_room: room },
    });
    const source = new ScriptedSource([first]);
    const result = await classifyPrefill(source, quiet);
    if (result.kind !== 'early') throw new Error(`expected an early handoff, got ${result.kind}`);
    expect(result.bootstrap).toEqual({
      bootstrap_host: '10.0.0.3',
      bootstrap_port: 8998,
      bootstrap_room: 9223372036854775000n,
    });
    source.push(out({})).push(Annotated.fromData(LLMEngineOutput.length())).end();
    await expect(result.task.wait()).resolves.toBeUndefined();
  });

  it.each([
    ['2^53 - 1 as a JSON number', 9007199254740991, 9007199254740991n],
    ['2^53 as a decimal string', '9007199254740992', 9007199254740992n],
    ['2^53 + 1 as a decimal string', '9007199254740993', 9007199254740993n],
    ['2^53 + 1 as a bigint', 9007199254740993n, 9007199254740993n],
    ['2^64 - 1 as a decimal string', '18446744073709551615', 18446744073709551615n],
  ])('a room at the 2^53 edge stays exact: %s', async (_, room, exact) => {
    const first = out({ disaggregated_params: { bootstrap_host: 'h', bootstrap_port: 1, bootstrap_room: room } });
    const result = await classifyPrefill(new ScriptedSource([first]).end(), quiet);
    expect(result.kind === 'early' && result.bootstrap.bootstrap_room).toBe(exact);
  });

  it('a room that arrived as a JSON number above 2^53 - 1 is refused: it has already lost precision', async () => {
    const { bootstrap_room: room } = JSON.parse('{"bootstrap_room": 9007199254740993}');
    expect(room).toBe(9007199254740992); // what JSON.parse made of it
    const first = out({ disaggregated_params: { bootstrap_host: 'h', bootstrap_port: 1, bootstrap_room: room } });
    const call = classifyPrefill(new ScriptedSource([first]), quiet);
    await expect(call).rejects.toMatchObject({ name: 'PrefillError', kind: 'no_disaggregated_params' });
    await expect(call).rejects.toThrow('bootstrap_room 9007199254740992 arrived as a JSON number above 2^53 - 1');
  });

  it('an early handoff whose prefill later fails fails its task', async () => {
    const first = out({ disaggregated_params: { bootstrap_host: 'h', bootstrap_port: 1, bootstrap_room: 7n } });
    const source = new ScriptedSource([first]);
    const result = await classifyPrefill(source, quiet);
    if (result.kind !== 'early') throw new Error('expected an early handoff');
    source.push(Annotated.fromData(LLMEngineOutput.error('NIXL transfer failed'))).end();
    await expect(result.task.wait()).rejects.toThrow('Prefill backend failed: NIXL transfer failed');
  });

  it.each([
    ['no host', { bootstrap_port: 1, bootstrap_room: 1 }],
    ['a port of 65536', { bootstrap_host: 'h', bootstrap_port: 65536, bootstrap_room: 1 }],
    ['a negative room', { bootstrap_host: 'h', bootstrap_port: 1, bootstrap_room: -1 }],
    ['a room of 2^64', { bootstrap_host: 'h', bootstrap_port: 1, bootstrap_room: (1n << 64n).toString() }],
  ])('an incomplete bootstrap triple (%s) is not an early handoff', async (_, params) => {
    const result = await classifyPrefill(
      new ScriptedSource([out({ finish_reason: 'length', disaggregated_params: params })]).end(),
      quiet,
    );
    expect(result.kind).toBe('handoff');
  });
});

describe('classifyPrefill, field by field', () => {
  const classify = (...items: Item[]) => classifyPrefill(new ScriptedSource(items).end(), quiet);
  const bootstrap = (fields: Record<string, unknown>) =>
    out({ disaggregated_params: { bootstrap_host: 'p0', bootstrap_port: 8998, bootstrap_room: 7, ...fields } });

  it('an early handoff needs a host, a port in 0-65535 and a room that is an unsigned 64-bit integer', async () => {
    const kindOf = async (fields: Record<string, unknown>) => {
      const result = await classify(bootstrap(fields));
      if (result.kind === 'early') await result.task.wait();
      return result.kind === 'early' ? result.bootstrap.bootstrap_room : result.kind;
    };
    expect(await kindOf({})).toBe(7n);
    expect(await kindOf({ bootstrap_room: 0 })).toBe(0n);
    expect(await kindOf({ bootstrap_room: '18446744073709551615' })).toBe(18446744073709551615n);
    expect(await kindOf({ bootstrap_room: 12n })).toBe(12n);
    expect(await kindOf({ bootstrap_port: 0 })).toBe(7n);
    for (const fields of [
      { bootstrap_host: '' },
      { bootstrap_host: 5 },
      { bootstrap_port: 65536 },
      { bootstrap_port: -1 },
      { bootstrap_port: 1.5 },
      { bootstrap_room: -1 },
      { bootstrap_room: '18446744073709551616' },
      { bootstrap_room: '12a' },
      { bootstrap_room: 'a12' },
      { bootstrap_room: '' },
      { bootstrap_room: 1.5 },
      { bootstrap_room: -(2 ** 60) },
    ]) {
      // Not a rendezvous: the parameters are handed to decode as they are.
      expect(await kindOf(fields), JSON.stringify(fields)).toBe('handoff');
    }
  });

  it('a finished answer (stop, not length) is the answer, without the handoff fields the worker named', async () => {
    const item = Annotated.withWire(out({ finish_reason: 'stop', text: 'done', disaggregated_params: vllmParams }), [
      {
        form: 'body',
        text: '{...}',
        json: {
          choices: [{ text: 'done', finish_reason: 'stop', disaggregated_params: { ctx_request_id: 1 } }],
          kv_transfer_params: vllmParams,
          disaggregated_params: vllmParams,
          usage: { prompt_tokens: 3 },
        },
      },
      { form: 'body', text: '{}', json: { object: 'x' } },
    ]);
    const result = await classify(item);
    expect(result.kind).toBe('finished');
    if (result.kind !== 'finished') return;
    expect(result.output.data).toEqual({ token_ids: [1], finish_reason: 'stop', text: 'done' });
    expect(Annotated.wire(result.output)).toEqual([
      {
        form: 'body',
        text: undefined,
        json: { choices: [{ text: 'done', finish_reason: 'stop' }], usage: { prompt_tokens: 3 } },
      },
      { form: 'body', text: undefined, json: { object: 'x' } },
    ]);
    // Without a wire, the item as it is (less its handoff parameters).
    const plain = await classify(out({ finish_reason: 'stop', disaggregated_params: vllmParams }));
    expect(plain.kind === 'finished' && plain.output.data).toEqual({ token_ids: [1], finish_reason: 'stop' });
    // A null finish is no finish: prefill goes on to its parameters.
    expect((await classify(out({ finish_reason: null, disaggregated_params: vllmParams }))).kind).toBe('handoff');
  });

  it('the first parameters win; the last prompt details reported win, a later output without them keeps them', async () => {
    const withDetails = (cached: number | null) => ({
      completion_usage: {
        prompt_tokens: 9,
        completion_tokens: 1,
        total_tokens: 10,
        ...(cached === null ? {} : { prompt_tokens_details: { cached_tokens: cached } }),
      },
    });
    const result = await classify(
      out({ ...withDetails(4) }),
      out({ disaggregated_params: vllmParams, ...withDetails(null) }),
      out({ disaggregated_params: { other: true }, ...withDetails(6) }),
      out({ ...withDetails(null) }),
    );
    expect(result).toMatchObject({ kind: 'handoff', params: vllmParams, promptTokensDetails: { cached_tokens: 6 } });
    const none = await classify(out({ disaggregated_params: vllmParams }));
    expect(none).not.toHaveProperty('promptTokensDetails');
  });

  it('a TensorRT-LLM context response must name its context request; other parameters pass unchecked', async () => {
    for (const params of [{ request_type: 'context_only' }, { ctx_request_id: null }]) {
      await expect(classify(out({ disaggregated_params: params }))).rejects.toThrow(
        'the TensorRT-LLM context response has no ctx_request_id for the generation request',
      );
    }
    expect(await classify(out({ disaggregated_params: 'opaque' }))).toMatchObject({
      kind: 'handoff',
      params: 'opaque',
    });
    expect(await classify(out({ disaggregated_params: { request_type: 'generation_only' } }))).toMatchObject({
      kind: 'handoff',
    });
  });
});

describe('classifyPrefill, with nulls where workers leave fields out', () => {
  it('an output without data says so', async () => {
    const { error } = await failure([{ event: 'metrics' } as Item]);
    expect(error.message).toContain('the first prefill output had no data');
    const empty = await failure([{ data: null } as unknown as Item]);
    expect(empty.error.message).toContain('the first prefill output had no data');
  });

  it('disaggregated_params of null are none: no handoff, and a finished answer carries no params', async () => {
    const { error } = await failure([out({ finish_reason: 'length', disaggregated_params: null } as never)]);
    expect(error.kind).toBe('no_disaggregated_params');
    const finished = await classifyPrefill(
      new ScriptedSource([out({ finish_reason: 'stop', disaggregated_params: null } as never)]).end(),
      quiet,
    );
    expect(finished.kind).toBe('finished');
    expect(finished).not.toHaveProperty('params');
  });

  it('prompt details of null are none', async () => {
    const result = await classifyPrefill(
      new ScriptedSource([
        out({
          finish_reason: 'length',
          disaggregated_params: vllmParams,
          completion_usage: { prompt_tokens: 3, completion_tokens: 1, total_tokens: 4, prompt_tokens_details: null },
        } as never),
      ]).end(),
      quiet,
    );
    expect(result.kind).toBe('handoff');
    expect(result).not.toHaveProperty('promptTokensDetails');
  });
});
