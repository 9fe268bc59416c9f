import { describe, expect, it } from 'vitest';
import { sglangBootstrap, vllmNixl } from '../../src/engines/registry.js';
import { promptSideOf, refusePromptSide } from '../../src/flow/prompt-side.js';
import { Annotated, type WireChunk } from '../../src/protocol/annotated.js';
import type { EngineItem } from '../../src/protocol/llm-engine-output.js';

/** An item as httpEngine reads it: its data, and the worker's JSON on the wire. */
function item(json: unknown, form: WireChunk['form'] = 'event', text?: string): EngineItem {
  return Annotated.withWire(Annotated.fromData({ token_ids: [], ...(text === undefined ? {} : { text }) }), [
    { form, text: JSON.stringify(json), json: json as Record<string, unknown> },
  ]);
}
const wire = (merged: EngineItem) => Annotated.wire(merged)?.map((chunk) => chunk.json);

/** vLLM's prompt logprobs of "Hi there" in two tokens, as its prefill answers them. */
const promptLogprobs = [null, { '42': { logprob: -1.5, rank: 3, decoded_token: ' there' } }];

/** vLLM's whole prefill answer to an echo with logprobs: the prompt's two tokens and the one it computed. */
const echoedPrefill = item(
  {
    choices: [
      {
        index: 0,
        text: 'Hi there!',
        logprobs: {
          tokens: ['Hi', ' there', '!'],
          token_logprobs: [null, -1.5, -0.1],
          top_logprobs: [null, { ' there': -1.5 }, { '!': -0.1 }],
          text_offset: [0, 2, 8],
        },
        prompt_logprobs: promptLogprobs,
      },
    ],
    kv_transfer_params: { do_remote_prefill: true },
  },
  'body',
);

describe('what a request asks of its prompt: the fields decode does not get', () => {
  it.each([
    ['vllm', { prompt: 'Hi', prompt_logprobs: 0 }, ['prompt_logprobs']],
    ['vllm', { prompt: 'Hi', echo: true, logprobs: 1 }, ['echo']],
    ['vllm', { prompt: 'Hi', echo: true, logprobs: 1, prompt_logprobs: 2 }, ['prompt_logprobs', 'echo']],
    ['vllm', { messages: [{ role: 'user', content: 'x' }], echo: true }, ['echo']],
    ['vllm', { messages: [{ role: 'user', content: 'x' }], prompt_logprobs: 1 }, ['prompt_logprobs']],
    ['sglang', { prompt: 'Hi', echo: true, logprobs: 1 }, ['echo']],
    ['sglang', { text: 'Hi', return_logprob: true, logprob_start_len: 0 }, []],
  ] as const)('%s %o: %o', (engine, request, strip) => {
    expect(promptSideOf(engine, request)?.strip).toEqual(strip);
  });

  it.each([
    ['vllm', { prompt: 'Hi' }],
    ['vllm', { prompt: 'Hi', echo: true }], // decode echoes a prompt it has, with no logprobs to compute
    ['vllm', { prompt: 'Hi', logprobs: 2 }], // the output's logprobs: decode's own
    ['vllm', { text: 'Hi', return_logprob: true }], // no /generate on vLLM
    ['sglang', { prompt: 'Hi', prompt_logprobs: 1 }], // a vLLM field
    ['sglang', { messages: [{ role: 'user', content: 'x' }], echo: true }],
    ['sglang', { text: 'Hi', return_logprob: false }],
  ] as const)('nothing for %s %o', (engine, request) => {
    expect(promptSideOf(engine, request)).toBeUndefined();
  });

  it('refused before any worker: streamed prompt logprobs on vLLM (as vLLM refuses them), an echo with logprobs of token ids', () => {
    for (const value of [1, -1]) {
      expect(refusePromptSide('vllm', { prompt: 'Hi', stream: true, prompt_logprobs: value })).toEqual({
        param: 'prompt_logprobs',
        message: '`prompt_logprobs` are not available when `stream=True`.',
      });
    }
    expect(refusePromptSide('vllm', { prompt: 'Hi', stream: true, prompt_logprobs: 0 })).toBeUndefined();
    expect(refusePromptSide('vllm', { prompt: 'Hi', prompt_logprobs: 5 })).toBeUndefined();
    for (const engine of ['vllm', 'sglang'] as const) {
      expect(refusePromptSide(engine, { prompt: [1, 2, 3], echo: true, logprobs: 0 })).toMatchObject({ param: 'echo' });
      expect(refusePromptSide(engine, { prompt: [1, 2, 3], echo: true })).toBeUndefined();
      expect(refusePromptSide(engine, { prompt: ['a', 'b'], echo: true, logprobs: 0 })).toBeUndefined();
    }
    // Through the connectors, beside their own refusals.
    expect(vllmNixl.refuse?.({ prompt: 'Hi', stream: true, prompt_logprobs: 2 })).toMatchObject({
      param: 'prompt_logprobs',
    });
    expect(sglangBootstrap.refuse?.({ prompt: [5, 6], echo: true, logprobs: 1 })).toMatchObject({ param: 'echo' });
    expect(vllmNixl.promptSide?.({ prompt: 'Hi', prompt_logprobs: 1 })?.strip).toEqual(['prompt_logprobs']);
    expect(sglangBootstrap.promptSide?.({ text: 'Hi', return_logprob: true })?.strip).toEqual([]);
  });
});

describe("prefill's answer merged into decode's", () => {
  it("vLLM completions, whole: each choice gets prefill's prompt_logprobs; nothing else changes", () => {
    const merge = promptSideOf('vllm', { prompt: 'Hi there', prompt_logprobs: 1 })?.merge(
      item({ choices: [{ index: 0, text: '!', prompt_logprobs: promptLogprobs }] }, 'body'),
    );
    const decode = item(
      { id: 'cmpl-1', choices: [{ index: 0, text: ' Bye', finish_reason: 'length' }] },
      'body',
      ' Bye',
    );
    const merged = merge?.(decode) as EngineItem;
    expect(wire(merged)).toEqual([
      { id: 'cmpl-1', choices: [{ index: 0, text: ' Bye', finish_reason: 'length', prompt_logprobs: promptLogprobs }] },
    ]);
    expect(Annotated.wire(merged)?.[0]?.text).toBeUndefined(); // the JSON changed: written anew
    expect(merged.data?.text).toBe(' Bye');
  });

  it('vLLM chat, whole: the top-level prompt_logprobs; streamed chunks stay as they are', () => {
    const merge = promptSideOf('vllm', { messages: [{ role: 'user', content: 'x' }], prompt_logprobs: 0 })?.merge(
      item({ object: 'chat.completion', choices: [], prompt_logprobs: promptLogprobs }, 'body'),
    );
    const whole = item(
      { object: 'chat.completion', choices: [{ index: 0, message: { role: 'assistant', content: 'y' } }] },
      'body',
    );
    expect(wire(merge?.(whole) as EngineItem)?.[0]).toMatchObject({ prompt_logprobs: promptLogprobs });
    const chunk = item({ object: 'chat.completion.chunk', choices: [{ index: 0, delta: { content: 'y' } }] });
    expect(merge?.(chunk)).toBe(chunk);
  });

  it('completions echo, whole: the prompt before the text, its logprobs before decode’s, offsets moved on from the prompt', () => {
    const merge = promptSideOf('vllm', { prompt: 'Hi there', echo: true, logprobs: 1 })?.merge(echoedPrefill);
    const decode = item(
      {
        choices: [
          {
            index: 0,
            text: '? Yes',
            logprobs: {
              tokens: ['?', ' Yes'],
              token_logprobs: [-0.2, -0.3],
              top_logprobs: [{ '?': -0.2 }, { ' Yes': -0.3 }],
              text_offset: [0, 1],
            },
            finish_reason: 'length',
          },
        ],
      },
      'body',
      '? Yes',
    );
    const merged = merge?.(decode) as EngineItem;
    expect(wire(merged)?.[0]).toEqual({
      choices: [
        {
          index: 0,
          text: 'Hi there? Yes',
          logprobs: {
            tokens: ['Hi', ' there', '?', ' Yes'],
            token_logprobs: [null, -1.5, -0.2, -0.3],
            top_logprobs: [null, { ' there': -1.5 }, { '?': -0.2 }, { ' Yes': -0.3 }],
            text_offset: [0, 2, 8, 9],
          },
          finish_reason: 'length',
          prompt_logprobs: promptLogprobs,
        },
      ],
    });
    expect(merged.data?.text).toBe('Hi there? Yes');
  });

  it("completions echo, streamed: the first chunk of a choice gets the prompt; later ones' offsets move by the prompt's length in code points", () => {
    const prompt = 'Hé 😀';
    const prefill = item(
      {
        choices: [
          {
            index: 0,
            text: `${prompt}!`,
            logprobs: { tokens: ['Hé', ' 😀', '!'], token_logprobs: [null, -1, -0.1], text_offset: [0, 2, 4] },
          },
        ],
      },
      'body',
    );
    const merge = promptSideOf('vllm', { prompt, echo: true, logprobs: 0, stream: true })?.merge(prefill);
    const chunk = (text: string, offset: number) =>
      item(
        { choices: [{ index: 0, text, logprobs: { tokens: [text], token_logprobs: [-0.2], text_offset: [offset] } }] },
        'event',
        text,
      );
    const first = merge?.(chunk('?', 0)) as EngineItem;
    const second = merge?.(chunk(' Yes', 1)) as EngineItem;
    expect(wire(first)?.[0]).toEqual({
      choices: [
        {
          index: 0,
          text: `${prompt}?`,
          logprobs: { tokens: ['Hé', ' 😀', '?'], token_logprobs: [null, -1, -0.2], text_offset: [0, 2, 4] },
        },
      ],
    });
    expect(first.data?.text).toBe(`${prompt}?`);
    // [...'Hé 😀'].length is 4 (Python's len), not 5 (UTF-16 units).
    expect(wire(second)?.[0]).toMatchObject({ choices: [{ text: ' Yes', logprobs: { text_offset: [5] } }] });
    expect(second.data?.text).toBe(' Yes');
  });

  it("SGLang's offsets (-1) stay -1; a batch's choices each get their own prompt", () => {
    const prefill = item(
      {
        choices: ['a', 'b'].map((p, index) => ({
          index,
          text: `${p}.`,
          logprobs: { tokens: [p, '.'], token_logprobs: [null, -0.1], text_offset: [-1, -1] },
        })),
      },
      'body',
    );
    const merge = promptSideOf('sglang', { prompt: ['a', 'b'], echo: true, logprobs: 0 })?.merge(prefill);
    const decode = item(
      {
        choices: [0, 1].map((index) => ({
          index,
          text: '!',
          logprobs: { tokens: ['!'], token_logprobs: [-0.3], text_offset: [-1] },
        })),
      },
      'body',
    );
    expect(wire(merge?.(decode) as EngineItem)?.[0]).toEqual({
      choices: ['a', 'b'].map((p, index) => ({
        index,
        text: `${p}!`,
        logprobs: { tokens: [p, '!'], token_logprobs: [null, -0.3], text_offset: [-1, -1] },
      })),
    });
  });

  it('vLLM chat echo: whole, the last message before the content when the roles match; streamed, its own chunk after the role chunk', () => {
    const messages = [
      { role: 'user', content: 'Write' },
      {
        role: 'assistant',
        content: [
          { type: 'text', text: 'Once' },
          { type: 'text', text: 'upon' },
        ],
      },
    ];
    const side = promptSideOf('vllm', { messages, echo: true, stream: true });
    const merge = side?.merge(item({ object: 'chat.completion', choices: [] }, 'body'));
    const envelope = { id: 'c1', object: 'chat.completion.chunk', created: 1, model: 'm' };
    const role = item(
      {
        ...envelope,
        choices: [{ index: 0, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null }],
      },
      'event',
      '',
    );
    const merged = merge?.(role) as EngineItem;
    expect(wire(merged)).toEqual([
      Annotated.wire(role)?.[0]?.json,
      { ...envelope, choices: [{ index: 0, delta: { content: 'Once\nupon' }, logprobs: null, finish_reason: null }] },
    ]);
    // The role chunk is the worker's own text still; only the added chunk is new.
    expect(Annotated.wire(merged)?.[0]?.text).toBe(Annotated.wire(role)?.[0]?.text);
    expect(merged.data?.text).toBe('Once\nupon');
    const token = item({ ...envelope, choices: [{ index: 0, delta: { content: ' a' } }] }, 'event', ' a');
    expect(merge?.(token)).toBe(token);
    const whole = promptSideOf('vllm', { messages, echo: true })?.merge(item({ choices: [] }, 'body'));
    const answer = item({ choices: [{ index: 0, message: { role: 'assistant', content: ' a time' } }] }, 'body');
    expect(wire(whole?.(answer) as EngineItem)?.[0]).toEqual({
      choices: [{ index: 0, message: { role: 'assistant', content: 'Once\nupon a time' } }],
    });
    // A last message of another role: nothing to echo.
    const other = promptSideOf('vllm', { messages: [{ role: 'user', content: 'Hi' }], echo: true })?.merge(
      item({ choices: [] }, 'body'),
    );
    expect(wire(other?.(answer) as EngineItem)?.[0]).toEqual(Annotated.wire(answer)?.[0]?.json);
  });

  it("SGLang /generate: every answer's input logprob lists begin with prefill's, whole (batches too) and streamed", () => {
    const inputs = (n: number) => Array.from({ length: n }, (_, i) => [i === 0 ? null : -0.5, 100 + i, null]);
    const prefill = item(
      [
        { text: 'x', meta_info: { input_token_logprobs: inputs(3), output_token_logprobs: [[-0.1, 7, null]] } },
        { text: 'y', meta_info: { input_token_logprobs: inputs(2) } },
      ],
      'body',
    );
    const merge = promptSideOf('sglang', { text: ['a', 'b'], return_logprob: true, logprob_start_len: 0 })?.merge(
      prefill,
    );
    const decode = item(
      [
        { text: 'X', meta_info: { input_token_logprobs: [], output_token_logprobs: [[-0.2, 8, null]] } },
        { text: 'Y', meta_info: { output_token_logprobs: [] } },
      ],
      'body',
    );
    expect(wire(merge?.(decode) as EngineItem)?.[0]).toEqual([
      { text: 'X', meta_info: { input_token_logprobs: inputs(3), output_token_logprobs: [[-0.2, 8, null]] } },
      { text: 'Y', meta_info: { input_token_logprobs: inputs(2), output_token_logprobs: [] } },
    ]);
    const streamed = item({ text: 'Y', index: 1, meta_info: { input_token_logprobs: [] } });
    expect(wire(merge?.(streamed) as EngineItem)?.[0]).toEqual({
      text: 'Y',
      index: 1,
      meta_info: { input_token_logprobs: inputs(2) },
    });
    // Nothing to merge when prefill computed none.
    expect(
      promptSideOf('sglang', { text: 'a', return_logprob: true })?.merge(item({ text: 'x', meta_info: {} }, 'body')),
    ).toBeUndefined();
  });

  it('no answer from prefill, or one without JSON: nothing to merge', () => {
    const side = promptSideOf('vllm', { prompt: 'Hi', prompt_logprobs: 1 });
    expect(side?.merge(undefined)).toBeUndefined();
    expect(side?.merge(Annotated.fromData({ token_ids: [] }))).toBeUndefined();
    const decode = Annotated.fromData({ token_ids: [1], text: 'x' });
    expect(side?.merge(echoedPrefill)?.(decode)).toBe(decode); // an item without wire JSON stays as it is
  });
});
