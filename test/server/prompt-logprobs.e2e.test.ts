import OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import type { FakeWorker } from '../../src/testing/index.js';
import { normalise, prefillCached, sse, whole, withPrefillCache } from '../support/answers.js';
import { proxyHarness } from '../support/proxy.js';

const { setup } = proxyHarness();

/**
 * What the decode worker answers the same request alone (aggregated: it computes the prompt
 * itself), as the yardstick: the proxy's answer must be it, but for the prompt's cache figure,
 * which is prefill's.
 */
async function compare(protocol: 'vllm' | 'sglang', path: string, body: Record<string, unknown>) {
  const { url, decode, prefill } = await setup(protocol);
  const cached = prefillCached(body);
  if (body.stream === true) {
    const proxied = await sse(url, path, body);
    const direct = await sse(decode.url, path, body);
    expect(proxied.status).toBe(200);
    expect(proxied.done).toBe(true);
    expect(normalise(proxied.payloads)).toEqual(normalise(withPrefillCache(direct.payloads, cached)));
  } else {
    const proxied = await whole(url, path, body);
    const direct = await whole(decode.url, path, body);
    expect(proxied.status).toBe(200);
    expect(normalise(proxied.body)).toEqual(normalise(withPrefillCache(direct.body, cached)));
  }
  return { decode, prefill, proxiedCall: decode.requests[0] as FakeWorker['requests'][number] };
}

/** A chat whose answer continues the assistant message it ends with (what vLLM's chat echo repeats). */
const continuing = [
  { role: 'user', content: 'Write' },
  { role: 'assistant', content: 'Once upon' },
];

describe("prompt logprobs: computed by prefill, merged into decode's answer", () => {
  it.each([
    [
      'completions, whole, prompt_logprobs',
      '/v1/completions',
      { model: 'm', prompt: 'The capital of France', max_tokens: 3, prompt_logprobs: 1 },
    ],
    [
      'completions, whole, echo with logprobs',
      '/v1/completions',
      { model: 'm', prompt: 'The capital of France', max_tokens: 3, echo: true, logprobs: 1 },
    ],
    [
      'completions, streamed, echo with logprobs',
      '/v1/completions',
      { model: 'm', prompt: 'The capital of France', max_tokens: 3, echo: true, logprobs: 1, stream: true },
    ],
    [
      'chat, whole, prompt_logprobs',
      '/v1/chat/completions',
      { model: 'm', messages: [{ role: 'user', content: 'Hi there' }], prompt_logprobs: 0 },
    ],
    [
      'chat, whole, echo of the assistant message it continues',
      '/v1/chat/completions',
      {
        model: 'm',
        messages: continuing,
        echo: true,
        add_generation_prompt: false,
      },
    ],
    [
      'chat, streamed, echo',
      '/v1/chat/completions',
      {
        model: 'm',
        messages: continuing,
        echo: true,
        stream: true,
      },
    ],
  ])(
    'vLLM %s: the answer a lone vLLM gives; decode got none of it, and used the KV prefill sent',
    async (_, path, body) => {
      const { proxiedCall, decode } = await compare('vllm', path, body);
      expect(decode.requests).toHaveLength(2); // the proxied decode leg, then the direct call
      expect(proxiedCall.body).not.toHaveProperty('prompt_logprobs');
      expect(proxiedCall.body).not.toHaveProperty('echo');
      // Without the merge decode would have computed the prompt again (or, before vLLM honoured
      // skip_reading_prefix_cache for a connector's KV, crashed: vllm#50792).
      expect(proxiedCall.kv).toBe('taken');
    },
  );

  it.each([
    [
      '/generate, whole, from the first token',
      '/generate',
      {
        text: 'The capital of France',
        sampling_params: { max_new_tokens: 3 },
        return_logprob: true,
        logprob_start_len: 0,
      },
    ],
    [
      '/generate, streamed',
      '/generate',
      {
        text: 'The capital of France',
        sampling_params: { max_new_tokens: 3 },
        return_logprob: true,
        logprob_start_len: 2,
        stream: true,
      },
    ],
    [
      '/generate, a batch',
      '/generate',
      {
        text: ['The capital of France', 'Two plus two'],
        sampling_params: { max_new_tokens: 2 },
        return_logprob: true,
        logprob_start_len: 0,
      },
    ],
    [
      'completions, whole, echo with logprobs',
      '/v1/completions',
      { model: 'm', prompt: 'The capital of France', max_tokens: 3, echo: true, logprobs: 1 },
    ],
    [
      'completions, streamed, echo with logprobs',
      '/v1/completions',
      { model: 'm', prompt: 'The capital of France', max_tokens: 3, echo: true, logprobs: 1, stream: true },
    ],
  ])("SGLang %s: the input logprobs a lone SGLang gives (decode's own are empty)", async (_, path, body) => {
    const { proxiedCall, prefill } = await compare('sglang', path, body);
    expect(proxiedCall.body).not.toHaveProperty('echo');
    expect(proxiedCall.body.return_logprob ?? true).toBe(true); // decode still gives the output's logprobs
    expect(prefill.requests[0]?.body).toMatchObject('echo' in body ? { echo: true } : { return_logprob: true });
  });

  it('through the openai client: a completion echoing its prompt with the logprobs of every token', async () => {
    const { client, decode } = await setup('vllm');
    const completion = await client.completions.create({
      model: 'm',
      prompt: 'The capital of France',
      max_tokens: 3,
      echo: true,
      logprobs: 0,
    });
    const [choice] = completion.choices;
    expect(choice?.text).toBe('The capital of Francetok0 tok1 tok2 ');
    // Six prompt tokens of four characters (the first has no logprob), then three of the answer.
    expect(choice?.logprobs?.tokens).toEqual(['The ', 'capi', 'tal ', 'of F', 'ranc', 'e', 'tok0 ', 'tok1 ', 'tok2 ']);
    expect(choice?.logprobs?.token_logprobs).toEqual([null, -0.5, -0.5, -0.5, -0.5, -0.5, -0.25, -0.25, -0.25]);
    expect(choice?.logprobs?.text_offset).toEqual([0, 4, 8, 12, 16, 20, 21, 26, 31]);
    expect(decode.requests[0]?.kv).toBe('taken');
  });

  it('what cannot be served is a 400 naming the field, before any worker: streamed prompt logprobs (vLLM), an echo with logprobs of token ids', async () => {
    const vllm = await setup('vllm');
    const streamed = await vllm.client.completions
      .create({ model: 'm', prompt: 'x', stream: true, prompt_logprobs: 2 } as never)
      .catch((error: unknown) => error);
    expect(streamed).toBeInstanceOf(OpenAI.BadRequestError);
    expect(streamed).toMatchObject({ param: 'prompt_logprobs', message: expect.stringContaining('stream=True') });
    const sglang = await setup('sglang');
    const ids = await sglang.client.completions
      .create({ model: 'm', prompt: [1, 2, 3], echo: true, logprobs: 1 })
      .catch((error: unknown) => error);
    expect(ids).toBeInstanceOf(OpenAI.BadRequestError);
    expect(ids).toMatchObject({ param: 'echo' });
    for (const { prefill, decode } of [vllm, sglang]) expect([prefill.requests, decode.requests]).toEqual([[], []]);
  });
});
