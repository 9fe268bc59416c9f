// The OpenAI Agents SDK (@openai/agents-core and -openai) running a tool-using agent through
// `disagg serve` with the state on the server: runs continued by previousResponseId, and a run
// in a conversation (conversationId). The SDK calls the tool itself between model calls; the
// router keeps each turn and sends the workers the whole of it.
import { Agent, Runner, tool } from '@openai/agents-core';
import { OpenAIProvider } from '@openai/agents-openai';
import OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import type { FakeRequest } from '../../../src/testing/index.js';
import { proxyHarness } from '../../support/proxy.js';

const { setup } = proxyHarness();

/** A model as an agent's behaves: a tool call for a user's turn, an answer once the tool's output comes back. */
function answer(record: FakeRequest) {
  const input = record.body.input;
  const last = Array.isArray(input) ? (input.at(-1) as { type?: string } | undefined) : undefined;
  return last?.type === 'function_call_output'
    ? { content: ['Found ', 'it.'] }
    : { toolCalls: [{ name: 'lookup', arguments: ['{"q":', '"x"}'] }] };
}

async function agentThrough() {
  const made = await setup('vllm', { decode: { answer, tokens: 16 } });
  const calls: string[] = [];
  const lookup = tool({
    name: 'lookup',
    description: 'Looks a thing up',
    parameters: z.object({ q: z.string() }),
    execute: async ({ q }) => {
      calls.push(q);
      return `result for ${q}`;
    },
  });
  const agent = new Agent({ name: 'finder', instructions: 'Find things.', tools: [lookup], model: 'fake-model' });
  const provider = new OpenAIProvider({ baseURL: `${made.url}/v1`, apiKey: 'sk-agent', useResponses: true });
  const runner = new Runner({ modelProvider: provider, tracingDisabled: true });
  return { ...made, agent, runner, calls };
}

/** The input items a worker request carried, by type (a message by its role). */
const shape = (body: Record<string, unknown> | undefined) =>
  ((body?.input ?? []) as Array<{ type?: string; role?: string }>).map((item) => item.role ?? item.type);

describe('the OpenAI Agents SDK through the router, its state on the server', () => {
  it('runs continued by previousResponseId: each model call answered, the tool called by the SDK, the workers sent each turn whole', async () => {
    const { agent, runner, calls, decode } = await agentThrough();
    const first = await runner.run(agent, 'Find x');
    expect(first.finalOutput).toBe('Found it.');
    const second = await runner.run(agent, 'Find x again', { previousResponseId: first.lastResponseId });
    expect(second.finalOutput).toBe('Found it.');
    expect(calls).toEqual(['x', 'x']);
    // The second run's last model call: the first run's whole exchange, then its own (a tool
    // call's answer holds the engine's assistant message before its function_call, as vLLM's does).
    expect(shape(decode.requests.at(-1)?.body)).toEqual([
      'user',
      'assistant',
      'function_call',
      'function_call_output',
      'assistant',
      'user',
      'assistant',
      'function_call',
      'function_call_output',
    ]);
    expect(decode.requests.every((record) => record.body.store === false)).toBe(true);
  });

  it('a run in a conversation: the SDK sends only what is new, the router the conversation before it, and the conversation holds every item', async () => {
    const { agent, runner, url, decode } = await agentThrough();
    // The SDK's key: a conversation is its creator's.
    const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'sk-agent', maxRetries: 0 });
    const conversation = await client.conversations.create({});
    const result = await runner.run(agent, 'Find x', { conversationId: conversation.id });
    expect(result.finalOutput).toBe('Found it.');
    expect(shape(decode.requests.at(-1)?.body)).toEqual(['user', 'assistant', 'function_call', 'function_call_output']);
    const items = await client.conversations.items.list(conversation.id, { order: 'asc' });
    expect(items.data.map((item) => ('role' in item ? item.role : item.type))).toEqual([
      'user',
      'assistant',
      'function_call',
      'function_call_output',
      'assistant',
    ]);
  });
});
