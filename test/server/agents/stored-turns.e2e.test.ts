// What a turn continuing another is sent, through `disagg serve` and the openai client: the
// earlier turns' items exactly as they were (reasoning with its encrypted content, tool calls
// and their outputs), the turn's own instructions only, and nothing of the router's state.
import type OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import { proxyHarness } from '../../support/proxy.js';

const { setup } = proxyHarness();

const REASONING = {
  type: 'reasoning',
  id: 'rs_0001',
  summary: [{ type: 'summary_text', text: 'Thought about it.' }],
  encrypted_content: 'gAAAAABo+/Zx3/opaque==',
};
const CALL = { type: 'function_call', id: 'fc_0001', call_id: 'call_1', name: 'lookup', arguments: '{"q":"x"}' };
const OUTPUT = { type: 'function_call_output', call_id: 'call_1', output: '{"rows":[1,2.5,null],"note":"é"}' };

describe('a turn continuing previous_response_id', () => {
  it('is sent the earlier turns’ items exactly as they were: reasoning with its encrypted content, a tool call and its output', async () => {
    const { client, decode, prefill } = await setup('vllm');
    const input = [
      { role: 'user', content: 'Find x' },
      REASONING,
      CALL,
      OUTPUT,
    ] as unknown as OpenAI.Responses.ResponseInput;
    const first = await client.responses.create({ model: 'm', input, max_output_tokens: 4 });
    await client.responses.create({
      model: 'm',
      input: 'And then?',
      max_output_tokens: 4,
      previous_response_id: first.id,
    });
    for (const worker of [prefill, decode]) {
      const sent = worker.requests.at(-1)?.body.input as Array<Record<string, unknown>>;
      expect(sent.slice(1, 4)).toEqual([REASONING, CALL, { id: expect.stringMatching(/^fco_/), ...OUTPUT }]);
      expect(sent.slice(4, -1)).toEqual(first.output);
      expect(sent.at(-1)).toEqual({ type: 'message', role: 'user', content: 'And then?' });
    }
  });

  it("carries no instructions over: each turn's are its own, as OpenAI defines them", async () => {
    const { client, decode } = await setup('vllm');
    const first = await client.responses.create({
      model: 'm',
      input: 'Hi',
      instructions: 'Be brief.',
      max_output_tokens: 4,
    });
    await client.responses.create({
      model: 'm',
      input: 'Again',
      instructions: 'Be long.',
      previous_response_id: first.id,
    });
    expect(decode.requests.at(-1)?.body.instructions).toBe('Be long.');
    await client.responses.create({ model: 'm', input: 'Once more', previous_response_id: first.id });
    expect(decode.requests.at(-1)?.body).not.toHaveProperty('instructions');
  });

  it('previous_response_id with conversation is a 400 before any worker, as OpenAI answers', async () => {
    const { client, decode, prefill } = await setup('vllm');
    const first = await client.responses.create({ model: 'm', input: 'Hi', max_output_tokens: 4 });
    const conversation = await client.conversations.create({});
    const calls = prefill.requests.length + decode.requests.length;
    const error = await client.responses
      .create({ model: 'm', input: 'Hi', previous_response_id: first.id, conversation: conversation.id })
      .catch((e: unknown) => e as { status?: number; param?: string });
    expect(error).toMatchObject({ status: 400, param: 'conversation' });
    expect(prefill.requests.length + decode.requests.length).toBe(calls);
  });
});
