// The fake workers' OpenAI Responses and Anthropic Messages, checked against vLLM's wire
// format: typed SSE events (`event:` equal to the data's `type`, no `[DONE]`), the whole
// bodies, a prefill's one-token answer with its handoff, and the errors of each route.
import { request } from 'undici';
import { describe, expect, it } from 'vitest';
import type { FakeWorker } from '../../src/testing/index.js';
import { fakeWorkers } from '../support/http.js';

const fakes = fakeWorkers();

interface Posted {
  status: number;
  contentType: string;
  text: string;
}

async function post(worker: FakeWorker, path: string, body: object): Promise<Posted> {
  const answer = await request(`${worker.url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  return {
    status: answer.statusCode,
    contentType: String(answer.headers['content-type']),
    text: await answer.body.text(),
  };
}

/** The typed events of a stream, each checked to name its own type on its `event:` line. */
// biome-ignore lint/suspicious/noExplicitAny: the events are checked field by field
function eventsOf(text: string): Array<Record<string, any>> {
  expect(text).not.toContain('[DONE]');
  return text
    .split('\n\n')
    .filter((frame) => frame !== '')
    .map((frame) => {
      const match = /^event: (.+)\ndata: (.+)$/.exec(frame);
      expect(match, frame).not.toBeNull();
      const data = JSON.parse(match?.[2] as string);
      expect(data.type).toBe(match?.[1]);
      return data;
    });
}

const HEX16 = /^[0-9a-f]{16}$/;
const RESPONSE_TEXT = [
  'response.created',
  'response.in_progress',
  'response.output_item.added',
  'response.content_part.added',
];
const RESPONSE_TEXT_END = ['response.output_text.done', 'response.content_part.done', 'response.output_item.done'];

describe('fake vLLM: POST /v1/responses', () => {
  it('streams the simple path: created, in_progress, the message item, a delta per token, completed with the whole object', async () => {
    const worker = await fakes.start({ role: 'decode', protocol: 'vllm', tokens: 3, model: 'm' });
    const answer = await post(worker, '/v1/responses', { model: 'm', input: 'Say hi', stream: true });
    expect(answer.status).toBe(200);
    expect(answer.contentType).toContain('text/event-stream');
    const events = eventsOf(answer.text);
    expect(events.map((event) => event.type)).toEqual([
      ...RESPONSE_TEXT,
      'response.output_text.delta',
      'response.output_text.delta',
      'response.output_text.delta',
      ...RESPONSE_TEXT_END,
      'response.completed',
    ]);
    expect(events.map((event) => event.sequence_number)).toEqual(events.map((_, i) => i));
    const [created, inProgress, added] = events;
    expect(created?.response).toMatchObject({
      status: 'in_progress',
      output: [],
      usage: null,
      kv_transfer_params: null,
    });
    expect(inProgress?.response).toEqual(created?.response);
    expect(added?.item.id).toMatch(HEX16);
    expect(events.slice(4, 7).map((event) => event.delta)).toEqual(['tok0 ', 'tok1 ', 'tok2 ']);
    expect(events[7]).toMatchObject({ text: 'tok0 tok1 tok2 ', item_id: added?.item.id });
    const completed = events.at(-1)?.response;
    expect(completed.id).toBe(created?.response.id);
    expect(completed).toMatchObject({
      object: 'response',
      status: 'completed',
      incomplete_details: null,
      model: 'm',
      output: [
        {
          type: 'message',
          role: 'assistant',
          status: 'completed',
          content: [{ type: 'output_text', text: 'tok0 tok1 tok2 ', annotations: [] }],
        },
      ],
      usage: { input_tokens: expect.any(Number), output_tokens: 3, output_tokens_details: { reasoning_tokens: 0 } },
    });
    expect(completed.output[0].id).toMatch(/^msg_[0-9a-f]{16}$/);
    expect(completed.usage.total_tokens).toBe(completed.usage.input_tokens + 3);
    expect(worker.requests[0]?.completed).toBe(true);
  });

  it('answers whole: a response object, incomplete at max_output_tokens, with usage in Responses names', async () => {
    const worker = await fakes.start({ role: 'decode', protocol: 'vllm', tokens: 8 });
    const answer = await post(worker, '/v1/responses', {
      input: 'Say hi',
      instructions: 'Be brief',
      max_output_tokens: 2,
    });
    expect(answer.status).toBe(200);
    const body = JSON.parse(answer.text);
    expect(body.id).toMatch(/^resp_[0-9a-f]{16}$/);
    expect(body).toMatchObject({
      object: 'response',
      status: 'incomplete',
      incomplete_details: { reason: 'max_output_tokens' },
      instructions: 'Be brief',
      max_output_tokens: 2,
      tool_choice: 'none',
      tools: [],
      kv_transfer_params: null,
      output: [{ type: 'message', content: [{ text: 'tok0 tok1 ' }] }],
    });
    expect(Object.keys(body.usage)).toEqual([
      'input_tokens',
      'input_tokens_details',
      'output_tokens',
      'output_tokens_details',
      'total_tokens',
    ]);
    expect(body.usage).toMatchObject({ output_tokens: 2, input_tokens_details: { cached_tokens: expect.any(Number) } });
    expect(body).not.toHaveProperty('error');
  });

  it('streams reasoning, then the message, then each tool call as its own output item', async () => {
    const worker = await fakes.start({
      role: 'decode',
      protocol: 'vllm',
      answer: {
        reasoning: ['Think', 'ing'],
        content: ['Hi'],
        toolCalls: [{ name: 'get', arguments: ['{"a"', ':1}'] }],
      },
    });
    const events = eventsOf((await post(worker, '/v1/responses', { input: 'x', stream: true })).text);
    expect(events.map((event) => event.type)).toEqual([
      'response.created',
      'response.in_progress',
      'response.output_item.added',
      'response.reasoning_part.added',
      'response.reasoning_text.delta',
      'response.reasoning_text.delta',
      'response.reasoning_text.done',
      'response.reasoning_part.done',
      'response.output_item.done',
      'response.output_item.added',
      'response.content_part.added',
      'response.output_text.delta',
      ...RESPONSE_TEXT_END,
      'response.output_item.added',
      'response.function_call_arguments.delta',
      'response.function_call_arguments.delta',
      'response.function_call_arguments.done',
      'response.output_item.done',
      'response.completed',
    ]);
    expect(events[8]?.item).toMatchObject({
      type: 'reasoning',
      content: [{ text: 'Thinking', type: 'reasoning_text' }],
    });
    expect(events.filter((event) => event.type === 'response.output_item.added').map((e) => e.output_index)).toEqual([
      0, 1, 2,
    ]);
    const call = events.find((event) => event.item?.type === 'function_call')?.item;
    expect(call).toMatchObject({
      name: 'get',
      arguments: '',
      status: 'in_progress',
      call_id: expect.stringMatching(/^call_/),
    });
    expect(events.at(-3)).toMatchObject({ arguments: '{"a":1}', name: 'get' });
    const final = events.at(-1)?.response;
    expect(final.output.map((item: { id: string }) => item.id.split('_')[0])).toEqual(['rs', 'msg', 'fc']);
    expect(final.output[2]).toMatchObject({ type: 'function_call', call_id: call.call_id, arguments: '{"a":1}' });
    expect(final.usage.output_tokens_details.reasoning_tokens).toBe(2);
  });

  it('an error in the stream cuts it: no response.completed and no [DONE], as vLLM', async () => {
    const worker = await fakes.start({
      role: 'decode',
      protocol: 'vllm',
      answer: { content: ['a', 'b'], error: { code: 500, message: 'boom' } },
    });
    const events = eventsOf((await post(worker, '/v1/responses', { input: 'x', stream: true })).text);
    expect(events.map((event) => event.type)).toEqual([
      ...RESPONSE_TEXT,
      'response.output_text.delta',
      'response.output_text.delta',
    ]);
    const whole = await post(worker, '/v1/responses', { input: 'x' });
    expect(whole.status).toBe(500);
    expect(JSON.parse(whole.text).error.message).toBe('boom');
  });

  it('an error-event fault counts tokens, not the opening events, and names its sequence number', async () => {
    const worker = await fakes.start({
      role: 'decode',
      protocol: 'vllm',
      fault: { type: 'error-event', afterTokens: 1 },
    });
    const events = eventsOf((await post(worker, '/v1/responses', { input: 'x', stream: true })).text);
    expect(events.map((event) => event.type)).toEqual([...RESPONSE_TEXT, 'response.output_text.delta', 'error']);
    expect(events.at(-1)).toMatchObject({ code: 'server_error', sequence_number: 5 });
  });

  it('refuses a body without input (400), as the request model does', async () => {
    const worker = await fakes.start({ role: 'decode', protocol: 'vllm' });
    const answer = await post(worker, '/v1/responses', { messages: [{ role: 'user', content: 'hi' }] });
    expect(answer.status).toBe(400);
    expect(answer.text).toContain('input: Field required');
  });
});

describe('fake vLLM: POST /v1/messages', () => {
  const body = { model: 'm', max_tokens: 16, system: 'Be brief', messages: [{ role: 'user', content: 'Say hi' }] };

  it('streams message_start, a text block with a delta per token, message_delta and message_stop', async () => {
    const worker = await fakes.start({ role: 'decode', protocol: 'vllm', tokens: 2 });
    const answer = await post(worker, '/v1/messages', { ...body, stream: true });
    expect(answer.status).toBe(200);
    const events = eventsOf(answer.text);
    expect(events.map((event) => event.type)).toEqual([
      'message_start',
      'content_block_start',
      'content_block_delta',
      'content_block_delta',
      'content_block_stop',
      'message_delta',
      'message_stop',
    ]);
    const start = events[0]?.message;
    expect(start.id).toMatch(/^chatcmpl-[0-9a-f]{16}$/);
    expect(start).toMatchObject({
      type: 'message',
      role: 'assistant',
      content: [],
      stop_reason: null,
      stop_sequence: null,
    });
    expect(start.usage).toEqual({ input_tokens: expect.any(Number), output_tokens: 0 });
    expect(events[1]).toEqual({ type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } });
    expect(events[2]).toEqual({ type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'tok0 ' } });
    expect(events[5]).toEqual({
      type: 'message_delta',
      delta: { stop_reason: 'end_turn' },
      usage: { input_tokens: start.usage.input_tokens, output_tokens: 2 },
    });
    expect(events[6]).toEqual({ type: 'message_stop' });
  });

  it('streams thinking (signed), text and tool_use blocks, and stops for tool_use', async () => {
    const worker = await fakes.start({
      role: 'decode',
      protocol: 'vllm',
      answer: { reasoning: ['Hm'], content: ['Hi'], toolCalls: [{ name: 'get', arguments: ['{"a"', ':1}'] }] },
    });
    const events = eventsOf((await post(worker, '/v1/messages', { ...body, stream: true })).text);
    expect(events.map((event) => [event.type, event.index, event.delta?.type ?? event.content_block?.type])).toEqual([
      ['message_start', undefined, undefined],
      ['content_block_start', 0, 'thinking'],
      ['content_block_delta', 0, 'thinking_delta'],
      ['content_block_delta', 0, 'signature_delta'],
      ['content_block_stop', 0, undefined],
      ['content_block_start', 1, 'text'],
      ['content_block_delta', 1, 'text_delta'],
      ['content_block_stop', 1, undefined],
      ['content_block_start', 2, 'tool_use'],
      ['content_block_delta', 2, 'input_json_delta'],
      ['content_block_delta', 2, 'input_json_delta'],
      ['content_block_stop', 2, undefined],
      ['message_delta', undefined, undefined],
      ['message_stop', undefined, undefined],
    ]);
    expect(events[3]?.delta.signature).toMatch(/^[0-9a-f]{32}$/);
    expect(events[8]?.content_block).toMatchObject({ name: 'get', input: {}, id: expect.stringMatching(/^call_/) });
    expect(events[12]?.delta).toEqual({ stop_reason: 'tool_use' });
    const whole = JSON.parse((await post(worker, '/v1/messages', body)).text);
    expect(whole.content).toEqual([
      { type: 'thinking', thinking: 'Hm', signature: expect.stringMatching(/^[0-9a-f]{32}$/) },
      { type: 'text', text: 'Hi' },
      { type: 'tool_use', id: expect.stringMatching(/^call_/), name: 'get', input: { a: 1 } },
    ]);
    expect(whole.stop_reason).toBe('tool_use');
  });

  it('answers whole without null keys, stopping at max_tokens', async () => {
    const worker = await fakes.start({ role: 'decode', protocol: 'vllm', tokens: 8 });
    const whole = JSON.parse((await post(worker, '/v1/messages', { ...body, max_tokens: 2 })).text);
    expect(whole).toEqual({
      id: expect.stringMatching(/^chatcmpl-[0-9a-f]{16}$/),
      type: 'message',
      role: 'assistant',
      content: [{ type: 'text', text: 'tok0 tok1 ' }],
      model: 'fake-model',
      stop_reason: 'max_tokens',
      usage: { input_tokens: expect.any(Number), output_tokens: 2 },
    });
  });

  it('an error in the stream is an Anthropic error event, with no message_stop', async () => {
    const worker = await fakes.start({
      role: 'decode',
      protocol: 'vllm',
      answer: { content: ['a'], error: { code: 500, message: 'boom' } },
    });
    const events = eventsOf((await post(worker, '/v1/messages', { ...body, stream: true })).text);
    expect(events.map((event) => event.type)).toEqual([
      'message_start',
      'content_block_start',
      'content_block_delta',
      'error',
    ]);
    expect(events.at(-1)).toEqual({ type: 'error', error: { type: 'internal_error', message: 'boom' } });
    const faulty = await fakes.start({
      role: 'decode',
      protocol: 'vllm',
      fault: { type: 'error-event', afterTokens: 1 },
    });
    const broken = eventsOf((await post(faulty, '/v1/messages', { ...body, stream: true })).text);
    expect(broken.map((event) => event.type)).toEqual([
      'message_start',
      'content_block_start',
      'content_block_delta',
      'error',
    ]);
  });

  it('a KV transfer that fails mid-call ends the stream with the error event after message_start', async () => {
    const decode = await fakes.start({ role: 'decode', protocol: 'vllm' });
    // Its own KV endpoint, which never held these blocks: the transfer fails.
    const params = {
      do_remote_prefill: true,
      remote_engine_id: 'nobody',
      remote_block_ids: [0, 1],
      remote_host: '127.0.0.1',
      remote_port: decode.port,
    };
    const events = eventsOf(
      (await post(decode, '/v1/messages', { ...body, stream: true, kv_transfer_params: params })).text,
    );
    expect(events.map((event) => event.type)).toEqual(['message_start', 'error']);
    const responses = eventsOf(
      (await post(decode, '/v1/responses', { input: 'x', stream: true, kv_transfer_params: params })).text,
    );
    expect(responses.map((event) => event.type)).toEqual(['response.created', 'response.in_progress']);
    const whole = await post(decode, '/v1/messages', { ...body, kv_transfer_params: params });
    expect(whole.status).toBe(500);
    expect(JSON.parse(whole.text)).toMatchObject({ type: 'error', error: { type: 'InternalServerError' } });
  });

  it("answers the handler's errors in Anthropic's shape, body validation in OpenAI's", async () => {
    const worker = await fakes.start({ role: 'decode', protocol: 'vllm', model: 'm', maxModelLen: 64 });
    const unknown = await post(worker, '/v1/messages', { ...body, model: 'other' });
    expect(unknown.status).toBe(404);
    expect(JSON.parse(unknown.text)).toEqual({
      type: 'error',
      error: { type: 'NotFoundError', message: 'The model `other` does not exist.' },
    });
    const tooLong = await post(worker, '/v1/messages', { ...body, max_tokens: 60 });
    expect(tooLong.status).toBe(400);
    expect(JSON.parse(tooLong.text)).toMatchObject({ type: 'error', error: { type: 'BadRequestError' } });
    for (const field of ['max_tokens', 'messages', 'model']) {
      const { [field]: _, ...without } = body as Record<string, unknown>;
      const answer = await post(worker, '/v1/messages', without);
      expect(answer.status).toBe(400);
      expect(JSON.parse(answer.text).error.message).toContain(`${field}: Field required`);
    }
    expect((await post(worker, '/v1/messages', { ...body, max_tokens: 0 })).status).toBe(400);
  });

  it('counts tokens (count_tokens) as a generation counts its prompt', async () => {
    const worker = await fakes.start({ role: 'decode', protocol: 'vllm' });
    const counted = await post(worker, '/v1/messages/count_tokens', {
      model: 'm',
      system: body.system,
      messages: body.messages,
    });
    expect(counted.status).toBe(200);
    const { input_tokens } = JSON.parse(counted.text);
    expect(JSON.parse(counted.text)).toEqual({
      input_tokens,
      context_management: { original_input_tokens: input_tokens },
    });
    const events = eventsOf((await post(worker, '/v1/messages', { ...body, stream: true })).text);
    expect(events[0]?.message.usage.input_tokens).toBe(input_tokens);
    expect(input_tokens).toBeGreaterThan(
      JSON.parse((await post(worker, '/v1/messages/count_tokens', { messages: body.messages })).text).input_tokens,
    );
  });
});

describe('fake vLLM prefill on the typed routes', () => {
  it.each([
    ['/v1/responses', { input: 'Say hi', max_output_tokens: 1, store: false }],
    ['/v1/messages', { model: 'm', max_tokens: 1, messages: [{ role: 'user', content: 'Say hi' }] }],
  ] as const)('%s: one token, whole, with kv_transfer_params at the top, which a decode takes', async (path, body) => {
    const prefill = await fakes.start({ role: 'prefill', protocol: 'vllm' });
    const decode = await fakes.start({ role: 'decode', protocol: 'vllm', tokens: 2 });
    const answer = await post(prefill, path, { ...body, kv_transfer_params: { do_remote_decode: true } });
    expect(answer.status).toBe(200);
    const whole = JSON.parse(answer.text);
    expect(whole.kv_transfer_params).toMatchObject({ do_remote_prefill: true, remote_port: prefill.port });
    if (path === '/v1/responses') {
      expect(whole).toMatchObject({
        status: 'incomplete',
        incomplete_details: { reason: 'max_output_tokens' },
        output: [{ content: [{ text: 'tok0 ' }] }],
        usage: { output_tokens: 1 },
      });
    } else {
      expect(whole).toMatchObject({
        stop_reason: 'max_tokens',
        content: [{ text: 'tok0 ' }],
        usage: { output_tokens: 1 },
      });
    }
    const streamed = await post(decode, path, {
      ...body,
      max_tokens: 2,
      max_output_tokens: 2,
      stream: true,
      kv_transfer_params: whole.kv_transfer_params,
    });
    expect(eventsOf(streamed.text).length).toBeGreaterThan(4);
    expect(decode.requests[0]?.kv).toBe('taken');
  });
});

describe('SGLang and TensorRT-LLM fakes on the typed routes', () => {
  it('SGLang answers aggregated Messages and Responses calls; a Messages call with a bootstrap room is its 400', async () => {
    const worker = await fakes.start({ role: 'decode', protocol: 'sglang', tokens: 2 });
    const messages = { model: 'm', max_tokens: 4, messages: [{ role: 'user', content: 'hi' }] };
    expect(JSON.parse((await post(worker, '/v1/messages', messages)).text).content).toEqual([
      { type: 'text', text: 'tok0 tok1 ' },
    ]);
    expect(JSON.parse((await post(worker, '/v1/responses', { input: 'hi' })).text).status).toBe('completed');
    const room = await post(worker, '/v1/messages', { ...messages, bootstrap_room: 7 });
    expect(room.status).toBe(400);
    expect(JSON.parse(room.text)).toEqual({
      type: 'error',
      error: {
        type: 'BadRequestError',
        message: 'Invalid request: Disaggregated request received without bootstrap room id.',
      },
    });
  });

  it('TensorRT-LLM serves Messages, not Responses', async () => {
    const worker = await fakes.start({ role: 'decode', protocol: 'trtllm', tokens: 1 });
    const messages = { model: 'm', max_tokens: 4, messages: [{ role: 'user', content: 'hi' }] };
    expect((await post(worker, '/v1/messages', messages)).status).toBe(200);
    expect((await post(worker, '/v1/responses', { input: 'hi' })).status).toBe(404);
  });
});
