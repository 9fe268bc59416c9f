// Background responses (`background: true`) through `disagg serve`, read by the openai client:
// answered `queued` at once and run without their client, polled to the end, their stream
// followed and resumed from a sequence number, and cancelled with both legs ended and no KV
// held (the harness checks the fakes' ledgers after each test).
import type OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import { eventually, eventuallyAsync } from '../../support/http.js';
import { proxyHarness } from '../../support/proxy.js';

const { setup } = proxyHarness();

const BODY = { model: 'm', input: 'Tell me a story', max_output_tokens: 64 };

type Event = { type: string; sequence_number: number; response?: OpenAI.Responses.Response };

describe('a background response', () => {
  it('is answered queued at once, runs without its client, and is polled to completion', async () => {
    const { client, decode } = await setup('vllm', { decode: { tokens: 6 } });
    const queued = await client.responses.create({ ...BODY, background: true });
    expect(queued).toMatchObject({ status: 'queued', background: true, store: true, output: [] });
    let last: OpenAI.Responses.Response = queued;
    await eventuallyAsync(async () => {
      last = await client.responses.retrieve(queued.id);
      return last.status === 'completed';
    }, 'the background response completed');
    expect(last.id).toBe(queued.id);
    expect(last.background).toBe(true);
    expect(last.output_text).toBe('tok0 tok1 tok2 tok3 tok4 tok5 ');
    expect(decode.requests[0]?.kv).toBe('taken');
    // The workers were asked for a stream (what a resumed stream replays), stored nowhere.
    expect(decode.requests[0]?.body).toMatchObject({ stream: true, store: false });
    expect(decode.requests[0]?.body).not.toHaveProperty('background');
  });

  it('streamed: the client reads every event to response.completed; resumed after sequence number N, the same events from N + 1', async () => {
    const { client } = await setup('vllm', { decode: { tokens: 6 } });
    const seen: Event[] = [];
    for await (const event of await client.responses.create({ ...BODY, background: true, stream: true })) {
      seen.push(event as Event);
    }
    expect(seen.at(-1)?.type).toBe('response.completed');
    const id = seen[0]?.response?.id as string;
    const resumed: Event[] = [];
    for await (const event of await client.responses.retrieve(id, { stream: true, starting_after: 3 })) {
      resumed.push(event as Event);
    }
    expect(resumed).toEqual(seen.filter((event) => event.sequence_number > 3));
  });

  it('a client that leaves its stream stops nothing: resumed from the last number it read, it gets the rest, in order, once', async () => {
    const { client, decode } = await setup('vllm', { decode: { tokens: 40, tokenIntervalMs: 5 } });
    const first: Event[] = [];
    const stream = await client.responses.create({ ...BODY, background: true, stream: true });
    for await (const event of stream) {
      first.push(event as Event);
      if (first.length === 5) break;
    }
    const id = first[0]?.response?.id as string;
    const after = first.at(-1)?.sequence_number as number;
    const rest: Event[] = [];
    for await (const event of await client.responses.retrieve(id, { stream: true, starting_after: after })) {
      rest.push(event as Event);
    }
    const numbers = [...first, ...rest].map((event) => event.sequence_number);
    expect(numbers).toEqual(numbers.map((_, i) => i));
    expect(rest.at(-1)?.type).toBe('response.completed');
    expect(decode.requests[0]?.aborted).toBe(false);
    expect((await client.responses.retrieve(id)).status).toBe('completed');
  });

  it('cancel stops both legs with no KV held, and the response reads cancelled; an ended one is answered as it ended', async () => {
    const { client, decode } = await setup('vllm', { decode: { tokens: 500, tokenIntervalMs: 5 } });
    const queued = await client.responses.create({ ...BODY, background: true });
    // Under way on decode (prefill done, its KV handed over) before the cancel.
    await eventually(() => decode.requests.length === 1 && decode.requests[0]?.kv === 'taken', 'decode under way');
    const cancelled = await client.responses.cancel(queued.id);
    expect(cancelled.status).toBe('cancelled');
    await eventually(() => decode.requests[0]?.aborted === true, 'the decode leg stopped');
    expect((await client.responses.retrieve(queued.id)).status).toBe('cancelled');
    // Cancelling again: the response as it ended.
    expect((await client.responses.cancel(queued.id)).status).toBe('cancelled');
  });

  it('needs store: a background response with store: false is a 400 before any worker', async () => {
    const { client, prefill, decode } = await setup('vllm');
    const error = await client.responses
      .create({ ...BODY, background: true, store: false })
      .catch((e: unknown) => e as { status?: number; param?: string });
    expect(error).toMatchObject({ status: 400, param: 'background' });
    expect(prefill.requests.length + decode.requests.length).toBe(0);
  });

  it('cancel of a response not run in the background is a 400', async () => {
    const { client } = await setup('vllm');
    const { id } = await client.responses.create(BODY);
    const error = await client.responses.cancel(id).catch((e: unknown) => e as { status?: number });
    expect(error).toMatchObject({ status: 400 });
  });
});
