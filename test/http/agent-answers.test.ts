import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { anthropicUsage, responsesUsage } from '../../src/http/agent-output.js';
import { httpEngine } from '../../src/http/http-engine.js';
import { Annotated, type EngineItem } from '../../src/protocol/annotated.js';
import { Controller } from '../../src/runtime/controller.js';
import { collect } from '../support/async.js';

const servers: Array<() => Promise<void>> = [];
afterEach(async () => {
  await Promise.all(servers.splice(0).map((close) => close()));
});

/** A loopback worker answering every call with `text` (an event stream, unless `json`). */
async function worker(text: string, type = 'text/event-stream'): Promise<{ url: string; paths: string[] }> {
  const paths: string[] = [];
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    paths.push(req.url ?? '');
    req.resume();
    req.on('end', () => {
      res.writeHead(200, { 'content-type': type });
      res.end(text);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  servers.push(() => new Promise((resolve) => server.close(() => resolve())));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, paths };
}

const event = (data: Record<string, unknown>) => `event: ${String(data.type)}\ndata: ${JSON.stringify(data)}\n\n`;

const responseObject = (status: string, extra: Record<string, unknown> = {}) => ({
  id: 'resp_1',
  object: 'response',
  status,
  output: [],
  usage: null,
  ...extra,
});
const usage = { input_tokens: 12, input_tokens_details: { cached_tokens: 4 }, output_tokens: 2, total_tokens: 14 };

const RESPONSES_STREAM = [
  event({ type: 'response.created', response: responseObject('in_progress'), sequence_number: 0 }),
  event({ type: 'response.in_progress', response: responseObject('in_progress'), sequence_number: 1 }),
  event({
    type: 'response.output_text.delta',
    item_id: 'i',
    output_index: 0,
    content_index: 0,
    delta: 'He',
    sequence_number: 2,
  }),
  event({
    type: 'response.output_text.delta',
    item_id: 'i',
    output_index: 0,
    content_index: 0,
    delta: 'llo',
    sequence_number: 3,
  }),
  event({ type: 'response.output_text.done', item_id: 'i', text: 'Hello', sequence_number: 4 }),
];
const completed = (status: string, details?: unknown) =>
  event({
    type: 'response.completed',
    response: responseObject(status, { usage, ...(details === undefined ? {} : { incomplete_details: details }) }),
    sequence_number: 5,
  });

async function read(url: string, body: Record<string, unknown>, api: 'responses' | 'messages'): Promise<EngineItem[]> {
  const stream = await httpEngine({ api })(body, new Controller(), { url });
  return collect(stream);
}

describe("reading the agents' APIs from a worker", () => {
  it("Responses: each event is an item carrying its event's name; the deltas are the text; response.completed is the finish with the usage in OpenAI's names, and the end (no [DONE])", async () => {
    const { url, paths } = await worker(RESPONSES_STREAM.join('') + completed('completed'));
    const items = await read(url, { input: 'Hi', stream: true }, 'responses');
    expect(paths).toEqual(['/v1/responses']);
    expect(items.map((item) => item.data?.text ?? '').join('')).toBe('Hello');
    const last = items.at(-1) as EngineItem;
    expect(last.data).toMatchObject({
      finish_reason: 'stop',
      completion_usage: {
        prompt_tokens: 12,
        completion_tokens: 2,
        total_tokens: 14,
        prompt_tokens_details: { cached_tokens: 4 },
      },
    });
    expect(items.flatMap((item) => Annotated.wire(item) ?? []).map((chunk) => chunk.event)).toEqual([
      'response.created',
      'response.in_progress',
      'response.output_text.delta',
      'response.output_text.delta',
      'response.output_text.done',
      'response.completed',
    ]);
    expect(items.some((item) => Annotated.isError(item))).toBe(false);
  });

  it('Responses: a completed response whose status is incomplete (max_output_tokens) finishes by length', async () => {
    const { url } = await worker(RESPONSES_STREAM.join('') + completed('incomplete', { reason: 'max_output_tokens' }));
    const items = await read(url, { input: 'Hi', stream: true }, 'responses');
    expect(items.at(-1)?.data?.finish_reason).toBe('length');
  });

  it("Responses: a stream cut before response.completed (vLLM's way to fail one) is a failure, never an end", async () => {
    const { url } = await worker(RESPONSES_STREAM.join(''));
    const items = await read(url, { input: 'Hi', stream: true }, 'responses');
    expect(Annotated.errorMessage(items.at(-1) as EngineItem)).toContain(
      'ended its event stream before response.completed',
    );
  });

  it("Responses: an error event or response.failed is a failure with the worker's words", async () => {
    const failedEvent = event({
      type: 'response.failed',
      response: responseObject('failed', { error: { code: 'server_error', message: 'engine died' } }),
      sequence_number: 5,
    });
    const failing = await worker(RESPONSES_STREAM.join('') + failedEvent);
    const items = await read(failing.url, { input: 'Hi', stream: true }, 'responses');
    expect(Annotated.errorMessage(items.at(-1) as EngineItem)).toContain('engine died');
    const erroring = await worker(
      RESPONSES_STREAM.join('') +
        event({ type: 'error', code: 'server_error', message: 'out of memory', sequence_number: 5 }),
    );
    const errored = await read(erroring.url, { input: 'Hi', stream: true }, 'responses');
    expect(Annotated.errorMessage(errored.at(-1) as EngineItem)).toContain('out of memory');
  });

  it("Responses: a whole answer (the prefill leg's) is one item with its text, finish, usage and vLLM's kv_transfer_params", async () => {
    const body = responseObject('incomplete', {
      incomplete_details: { reason: 'max_output_tokens' },
      output: [{ type: 'message', role: 'assistant', content: [{ type: 'output_text', text: 'tok0' }] }],
      usage,
      kv_transfer_params: { do_remote_prefill: true, remote_engine_id: 'e1' },
    });
    const { url } = await worker(JSON.stringify(body), 'application/json');
    const [item, ...rest] = await read(url, { input: 'Hi', max_output_tokens: 1 }, 'responses');
    expect(rest).toEqual([]);
    expect(item?.data).toMatchObject({
      text: 'tok0',
      finish_reason: 'length',
      disaggregated_params: { do_remote_prefill: true, remote_engine_id: 'e1' },
    });
  });

  const MESSAGES_STREAM = [
    event({
      type: 'message_start',
      message: {
        id: 'chatcmpl-1',
        type: 'message',
        role: 'assistant',
        content: [],
        usage: { input_tokens: 9, output_tokens: 0 },
      },
    }),
    event({ type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } }),
    event({ type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'Hi ' } }),
    event({ type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'there' } }),
    event({ type: 'content_block_stop', index: 0 }),
    event({ type: 'message_delta', delta: { stop_reason: 'max_tokens' }, usage: { output_tokens: 2 } }),
  ];

  it('Messages: text deltas are the text; message_delta is the finish, and message_stop goes with it as one item (the held terminal carries both)', async () => {
    const { url, paths } = await worker(MESSAGES_STREAM.join('') + event({ type: 'message_stop' }));
    const items = await read(url, { model: 'm', max_tokens: 8, messages: [], stream: true }, 'messages');
    expect(paths).toEqual(['/v1/messages']);
    expect(items.map((item) => item.data?.text ?? '').join('')).toBe('Hi there');
    const last = items.at(-1) as EngineItem;
    // The input counts of message_start, where the delta has none (Anthropic's own API).
    expect(last.data).toMatchObject({
      finish_reason: 'length',
      completion_usage: { prompt_tokens: 9, completion_tokens: 2 },
    });
    expect(Annotated.wire(last)?.map((chunk) => chunk.event)).toEqual(['message_delta', 'message_stop']);
  });

  it('Messages: an event between message_delta and message_stop (a ping) goes with the terminal, not after it', async () => {
    const { url } = await worker(MESSAGES_STREAM.join('') + event({ type: 'ping' }) + event({ type: 'message_stop' }));
    const items = await read(url, { model: 'm', max_tokens: 8, messages: [], stream: true }, 'messages');
    expect(items.some((item) => Annotated.isError(item))).toBe(false);
    expect(Annotated.wire(items.at(-1))?.map((chunk) => chunk.event)).toEqual([
      'message_delta',
      'ping',
      'message_stop',
    ]);
  });

  it('Messages: a stream cut before message_stop, or an error event, is a failure', async () => {
    const cut = await worker(MESSAGES_STREAM.join(''));
    const items = await read(cut.url, { model: 'm', max_tokens: 8, messages: [], stream: true }, 'messages');
    expect(Annotated.errorMessage(items.at(-1) as EngineItem)).toContain('ended its event stream before message_stop');
    const failing = await worker(
      MESSAGES_STREAM.slice(0, 3).join('') +
        `event: error\ndata: ${JSON.stringify({ type: 'error', error: { type: 'overloaded_error', message: 'Overloaded' } })}\n\n`,
    );
    const failed = await read(failing.url, { model: 'm', max_tokens: 8, messages: [], stream: true }, 'messages');
    expect(Annotated.errorMessage(failed.at(-1) as EngineItem)).toContain('Overloaded');
  });

  it("usage in each API's names maps to OpenAI's: Responses' cached input, Anthropic's cache reads counted into the prompt", () => {
    expect(responsesUsage(usage)).toEqual({
      prompt_tokens: 12,
      completion_tokens: 2,
      total_tokens: 14,
      prompt_tokens_details: { cached_tokens: 4 },
    });
    expect(
      anthropicUsage({ input_tokens: 3, cache_read_input_tokens: 7, cache_creation_input_tokens: 1, output_tokens: 5 }),
    ).toEqual({
      prompt_tokens: 11,
      completion_tokens: 5,
      total_tokens: 16,
      prompt_tokens_details: { cached_tokens: 7 },
    });
  });
});
