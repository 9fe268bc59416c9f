import { describe, expect, it } from 'vitest';
import { endpointNamed } from '../../src/endpoints/registry.js';
import { promptSideOf, refusePromptSide } from '../../src/engines/prompt-sides.js';
import { sglangBootstrap, vllmNixl } from '../../src/engines/registry.js';
import type { EngineItem } from '../../src/protocol/annotated.js';
import { Annotated, type WireChunk } from '../../src/protocol/annotated.js';

/** An item as httpEngine reads it: its data, and the worker's JSON on the wire. */
function item(json: unknown, form: WireChunk['form'] = 'event', text?: string): EngineItem {
  return Annotated.withWire(Annotated.fromData({ token_ids: [], ...(text === undefined ? {} : { text }) }), [
    { form, text: JSON.stringify(json), json: json as Record<string, unknown> },
  ]);
}
type Json = Record<string, unknown>;

const wire = (merged: EngineItem) => Annotated.wire(merged)?.map((chunk) => chunk.json);
/** The choices of the first wire chunk of `merged`. */
const choicesIn = (merged: EngineItem | undefined) =>
  ((wire(merged as EngineItem) ?? [])[0] as { choices: Json[] } | undefined)?.choices ?? [];

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

describe('which requests have a prompt side, at the edges', () => {
  const chat = [{ role: 'user', content: 'x' }];
  it.each([
    ['vllm', { prompt: 'Hi', prompt_logprobs: null }], // null is not asked
    ['sglang', { prompt: 'Hi', text: 'Hi', return_logprob: true }], // a prompt makes it a completion
    ['sglang', { return_logprob: true }], // neither text, ids nor embeddings: not /generate
    ['sglang', { text: ['a', 'b'], return_logprob: [false, false] }],
    ['sglang', { messages: chat, echo: true, logprobs: true }], // a chat's echo is vLLM's only
  ] as const)('nothing for %s %o', (engine, request) => {
    expect(promptSideOf(engine, request)).toBeUndefined();
  });

  it.each([
    [{ input_ids: [1, 2], return_logprob: true }],
    [{ input_embeds: [[0.1, 0.2]], return_logprob: true }],
    [{ text: ['a', 'b'], return_logprob: [false, true] }], // one element of a batch asks
  ])("SGLang's /generate by %o: input logprobs, nothing stripped", (request) => {
    expect(promptSideOf('sglang', request)?.strip).toEqual([]);
  });

  it('refused only where the rule holds: vLLM, a stream, an echo with logprobs of a prompt that is not text', () => {
    expect(refusePromptSide('sglang', { prompt: 'Hi', stream: true, prompt_logprobs: 2 })).toBeUndefined();
    for (const engine of ['vllm', 'sglang'] as const) {
      expect(refusePromptSide(engine, { prompt: 'Hi', echo: true, logprobs: 0 })).toBeUndefined();
      expect(refusePromptSide(engine, { prompt: [1, 2], logprobs: 0 })).toBeUndefined(); // no echo
      expect(refusePromptSide(engine, { messages: chat, echo: true, logprobs: true })).toBeUndefined();
      expect(refusePromptSide(engine, { prompt: ['a', 5], echo: true, logprobs: 0 })).toEqual({
        param: 'echo',
        message: expect.stringContaining('needs a text prompt when disaggregated'),
      });
    }
  });
});

describe("prefill's answer merged into decode's, at the edges", () => {
  const same = (merge: ((item: EngineItem) => EngineItem) | undefined, decode: EngineItem) =>
    expect(merge?.(decode)).toBe(decode);

  it('a completion choice without an index is choice 0; one prefill did not answer stays as it is', () => {
    const merge = promptSideOf('vllm', { prompt: 'Hi there', prompt_logprobs: 1 })?.merge(
      item({ choices: [{ text: '!', prompt_logprobs: promptLogprobs }] }, 'body'),
    );
    expect(
      wire(merge?.(item({ choices: [{ text: ' Bye' }, { index: 1, text: ' Yo' }] }, 'body')) as EngineItem),
    ).toStrictEqual([
      {
        choices: [
          { text: ' Bye', prompt_logprobs: promptLogprobs },
          { index: 1, text: ' Yo' },
        ],
      },
    ]);
  });

  it('prompt logprobs go into whole answers only, and only when prefill computed them', () => {
    const merge = promptSideOf('vllm', {
      prompt: 'Hi there',
      echo: true,
      logprobs: 0,
      prompt_logprobs: 0,
      stream: true,
    })?.merge(item({ choices: [{ index: 0, text: 'Hi there!', prompt_logprobs: promptLogprobs }] }, 'body'));
    const streamed = wire(merge?.(item({ choices: [{ index: 0, text: '?' }] })) as EngineItem);
    expect(streamed?.[0]).toEqual({ choices: [{ index: 0, text: 'Hi there?' }] });
    expect(streamed?.[0]).not.toHaveProperty('choices.0.prompt_logprobs');
    const without = promptSideOf('vllm', { prompt: 'Hi', echo: true, logprobs: 0 })?.merge(
      item({ choices: [{ index: 0, text: 'Hi!' }] }, 'body'),
    );
    const whole = wire(without?.(item({ choices: [{ index: 0, text: '?' }] }, 'body')) as EngineItem)?.[0];
    expect(whole).toEqual({ choices: [{ index: 0, text: 'Hi?' }] });
    expect(whole).not.toHaveProperty('choices.0.prompt_logprobs');
  });

  it('chunks without choices, or not JSON objects, keep their own text', () => {
    const merge = promptSideOf('vllm', { prompt: 'Hi', echo: true, logprobs: 0, stream: true })?.merge(echoedPrefill);
    same(merge, item({ choices: [], usage: { prompt_tokens: 2 } }));
    same(merge, item({ usage: { prompt_tokens: 2 } }));
    same(merge, item(null));
    const chat = promptSideOf('vllm', { messages: [{ role: 'user', content: 'x' }], prompt_logprobs: 0 });
    same(
      chat?.merge(item(null, 'body')),
      item({ choices: [{ index: 0, message: { role: 'assistant', content: 'y' } }] }, 'body'),
    );
    same(
      chat?.merge(item({ choices: [] }, 'body')), // prefill computed no prompt logprobs
      item({ choices: [{ index: 0, message: { role: 'assistant', content: 'y' } }] }, 'body'),
    );
  });

  it("an echo: a choice prefill did not answer stays as it is; the item's text is its first choice's, with its own prompt", () => {
    const prefill = item(
      {
        choices: ['a', 'b'].map((p, index) => ({
          index,
          text: `${p}.`,
          logprobs: { tokens: [p, '.'], token_logprobs: [null, -0.1], text_offset: [0, 1] },
        })),
      },
      'body',
    );
    const merge = promptSideOf('vllm', { prompt: ['a', 'b', 'c'], echo: true, logprobs: 0, stream: true })?.merge(
      prefill,
    );
    const chunk = (index: number, text: string) => ({
      form: 'event' as const,
      text: undefined,
      json: { choices: [{ index, text, logprobs: { tokens: [text], token_logprobs: [-0.3], text_offset: [0] } }] },
    });
    const two = Annotated.withWire(Annotated.fromData({ token_ids: [1], text: '!' }), [chunk(0, '!'), chunk(1, '?')]);
    const merged = merge?.(two) as EngineItem;
    expect(merged.data?.text).toBe('a!');
    expect(wire(merged)?.map((json) => (json as { choices: { text: string }[] }).choices[0]?.text)).toEqual([
      'a!',
      'b?',
    ]);
    const third = item({ choices: [{ index: 2, text: '.' }] });
    same(merge, third);
    // The first chunk of one item with two choices: its text is the first choice's.
    const again = promptSideOf('vllm', { prompt: ['a', 'b'], echo: true, logprobs: 0 })?.merge(prefill);
    const both = Annotated.withWire(Annotated.fromData({ token_ids: [1] }), [
      { form: 'body', text: undefined, json: { choices: [{ index: 0 }, { index: 1, text: '?' }] } },
    ]);
    const merged2 = again?.(both) as EngineItem;
    expect(merged2.data?.text).toBe('a'); // no text of its own: the prompt alone
    expect(choicesIn(merged2)).toStrictEqual([
      { index: 0, text: 'a', logprobs: { tokens: ['a'], token_logprobs: [null], text_offset: [0] } },
      { index: 1, text: 'b?', logprobs: { tokens: ['b'], token_logprobs: [null], text_offset: [0] } },
    ]);
  });

  it("an echo of what prefill answered without usable logprobs: decode's own stand", () => {
    const decodeLogprobs = { tokens: ['?'], token_logprobs: [-0.2], top_logprobs: [{ '?': -0.2 }], text_offset: [0] };
    const answer = (logprobs: unknown) =>
      promptSideOf('vllm', { prompt: 'Hi', echo: true, logprobs: 1 })?.merge(
        item({ choices: [{ index: 0, text: 'Hi!', logprobs }] }, 'body'),
      )?.(item({ choices: [{ index: 0, text: '?', logprobs: decodeLogprobs }] }, 'body'));
    const choice = (merged: EngineItem | undefined) => choicesIn(merged)[0];
    expect(choice(answer(null))).toStrictEqual({ index: 0, text: 'Hi?', logprobs: decodeLogprobs });
    expect(choice(answer({ token_logprobs: [-1, -0.1] }))).toStrictEqual({
      index: 0,
      text: 'Hi?',
      logprobs: decodeLogprobs,
    });
    // Without offsets prefill says nothing of where the prompt ends: decode's offsets stay.
    expect(choice(answer({ tokens: ['Hi', '!'], token_logprobs: [null, -0.1] }))?.logprobs).toStrictEqual({
      ...decodeLogprobs,
      tokens: ['Hi', '?'],
      token_logprobs: [null, -0.2],
    });
    // A list only one side has is that side's.
    expect(
      choice(answer({ tokens: ['Hi', '!'], top_logprobs: [null, {}], text_offset: [0, 2] }))?.logprobs,
    ).toStrictEqual({
      tokens: ['Hi', '?'],
      token_logprobs: [-0.2],
      top_logprobs: [null, { '?': -0.2 }],
      text_offset: [0, 2],
    });
  });

  it("an echo whose decode choice has no logprobs gets the prompt's alone", () => {
    const merged = promptSideOf('vllm', { prompt: 'Hi there', echo: true, logprobs: 1 })?.merge(echoedPrefill)?.(
      item({ choices: [{ index: 0, text: '?', logprobs: null }] }, 'body'),
    );
    expect(choicesIn(merged)[0]?.logprobs).toStrictEqual({
      tokens: ['Hi', ' there'],
      token_logprobs: [null, -1.5],
      top_logprobs: [null, { ' there': -1.5 }],
      text_offset: [0, 2],
    });
  });

  it("a streamed echo's later chunks: offsets moved, SGLang's -1 kept, chunks without offsets or logprobs as they are", () => {
    const merge = promptSideOf('vllm', { prompt: 'Hi there', echo: true, logprobs: 0, stream: true })?.merge(
      echoedPrefill,
    );
    merge?.(item({ choices: [{ index: 0, text: '?' }] }));
    const later = (logprobs: unknown) =>
      choicesIn(merge?.(item({ choices: [{ index: 0, text: ' a', logprobs }] })))[0]?.logprobs;
    expect(later({ tokens: [' a', ' b'], text_offset: [1, -1] })).toStrictEqual({
      tokens: [' a', ' b'],
      text_offset: [9, -1],
    });
    expect(later({ tokens: [' a'] })).toStrictEqual({ tokens: [' a'] });
    expect(later(null)).toBeNull();
  });

  it("a chat echo: the last message's text parts only, as it was sent; none for an empty or absent content or another role", () => {
    const whole = (last: Json, content: string | null, text?: string) =>
      promptSideOf('vllm', { messages: [{ role: 'user', content: 'Go' }, last], echo: true })?.merge(
        item({ choices: [] }, 'body'),
      )?.(item({ choices: [{ index: 0, message: { role: 'assistant', content } }] }, 'body', text));
    const content = (merged: EngineItem | undefined) => (choicesIn(merged)[0]?.message as Json | undefined)?.content;
    expect(content(whole({ role: 'assistant', content: 'Once' }, ' upon'))).toBe('Once upon');
    const parts = [
      { type: 'text', text: 'Once' },
      { type: 'image_url', image_url: { url: 'http://img' } },
      { type: 'text' },
      { type: 'text', text: 'upon' },
    ];
    expect(content(whole({ role: 'assistant', content: parts }, ' a time'))).toBe('Once\n\nupon a time');
    // A tool-calling answer has no content: the echo alone.
    expect(content(whole({ role: 'assistant', content: 'Once' }, null))).toBe('Once');
    // The item's text begins with the echo too.
    expect(whole({ role: 'assistant', content: 'Once' }, ' upon', ' upon')?.data?.text).toBe('Once upon');
    expect(whole({ role: 'assistant', content: 'Once' }, ' upon')?.data?.text).toBe('Once');
    const other = whole({ role: 'user', content: 'More' }, ' upon', ' upon');
    expect(content(other)).toBe(' upon');
    expect(other?.data?.text).toBe(' upon');
    expect(content(whole({ role: 'assistant', content: null }, ' upon'))).toBe(' upon');
  });

  it('a streamed chat echo: after the first role chunk of each choice, of the echoed role, with its index; never twice', () => {
    const envelope = { object: 'chat.completion.chunk' };
    const roleChunk = (index: number, role = 'assistant') =>
      item({ ...envelope, choices: [{ index, delta: { role, content: '' } }] }, 'event', '');
    const echo = (last: Json) =>
      promptSideOf('vllm', { messages: [last], echo: true, stream: true })?.merge(item({ choices: [] }, 'body'));
    const merge = echo({ role: 'assistant', content: 'Once' });
    const first = merge?.(roleChunk(1)) as EngineItem;
    expect(wire(first)?.[1]).toEqual({
      ...envelope,
      choices: [{ index: 1, delta: { content: 'Once' }, logprobs: null, finish_reason: null }],
    });
    expect(first.data?.text).toBe('Once');
    same(merge, roleChunk(1));
    const zero = item({ ...envelope, choices: [{ delta: { role: 'assistant' } }] }, 'event', '');
    expect(wire(merge?.(zero) as EngineItem)?.[1]).toMatchObject({ choices: [{ index: 0 }] });
    same(merge, roleChunk(2, 'tool')); // not the echoed role
    same(echo({ role: 'assistant', content: null }), roleChunk(0));
    same(echo({ role: 'assistant', content: [] }), roleChunk(0));
    // Without an echo a streamed chat has nothing merged, role chunk or not.
    same(
      promptSideOf('vllm', { messages: [{ role: 'user', content: 'x' }], prompt_logprobs: 0, stream: true })?.merge(
        item({ choices: [], prompt_logprobs: promptLogprobs }, 'body'),
      ),
      roleChunk(0),
    );
  });

  it("SGLang /generate: one answer, a batch where only some elements computed input logprobs, and decode's answers it cannot place", () => {
    const lists = [
      [null, 1, null],
      [-0.5, 2, null],
    ];
    const single = promptSideOf('sglang', { text: 'a', return_logprob: true })?.merge(
      item({ text: 'x', meta_info: { input_token_logprobs: lists } }, 'body'),
    );
    const decode = item({ text: 'X', meta_info: { input_token_logprobs: [] } }, 'body', 'X');
    const merged = single?.(decode) as EngineItem;
    expect(wire(merged)?.[0]).toStrictEqual({ text: 'X', meta_info: { input_token_logprobs: lists } });
    expect(merged.data).toStrictEqual(decode.data);
    const batch = promptSideOf('sglang', { text: ['a', 'b'], return_logprob: true })?.merge(
      item(
        [
          { text: 'x', meta_info: null },
          { text: 'y', meta_info: { input_token_logprobs: lists } },
        ],
        'body',
      ),
    );
    expect(wire(batch?.(item({ index: 1, meta_info: {} })) as EngineItem)?.[0]).toStrictEqual({
      index: 1,
      meta_info: { input_token_logprobs: lists },
    });
    // As they were, with the worker's own text: an element prefill computed none for, one it
    // did not answer, one without meta_info.
    for (const json of [
      { index: 0, meta_info: {} },
      { index: 5, meta_info: {} },
      { index: 1, meta_info: null },
      { index: 1 },
    ]) {
      const own = item(json);
      expect(Annotated.wire(batch?.(own) as EngineItem)).toStrictEqual(Annotated.wire(own));
    }
  });
});

describe("prefill's answer merged, where only part of an answer has something of prefill's", () => {
  it('a whole chat echo whose last message is not the answer\u2019s role still gets the prompt logprobs', () => {
    const merge = promptSideOf('vllm', {
      messages: [{ role: 'user', content: 'Hi' }],
      echo: true,
      prompt_logprobs: 1,
    })?.merge(item({ choices: [], prompt_logprobs: promptLogprobs }, 'body'));
    const answer = { choices: [{ index: 0, message: { role: 'assistant', content: 'Yo' } }] };
    expect(wire(merge?.(item(answer, 'body')) as EngineItem)?.[0]).toEqual({
      ...answer,
      prompt_logprobs: promptLogprobs,
    });
  });

  it('an SGLang batch answer: the element prefill computed input logprobs for is merged, the other stays as it was', () => {
    const lists = [[null, 1, null]];
    const merge = promptSideOf('sglang', { text: ['a', 'b'], return_logprob: true })?.merge(
      item([{ meta_info: {} }, { meta_info: { input_token_logprobs: lists } }], 'body'),
    );
    const first = { text: 'X', meta_info: { input_token_logprobs: [] } };
    const merged = wire(
      merge?.(item([first, { text: 'Y', meta_info: { input_token_logprobs: [] } }], 'body')) as EngineItem,
    );
    expect(merged?.[0]).toEqual([first, { text: 'Y', meta_info: { input_token_logprobs: lists } }]);
    expect((merged?.[0] as unknown[] | undefined)?.[0]).toBe(first);
  });
});

describe('the prompt side of a pooling request', () => {
  it('is none: an embeddings or rerank request is passed through, whatever it asks', () => {
    const body = { model: 'm', input: 'Hi', prompt_logprobs: 1, echo: true, logprobs: 1 };
    for (const engine of ['vllm', 'sglang'] as const) {
      expect(promptSideOf(engine, body, endpointNamed('embeddings'))).toBeUndefined();
      expect(promptSideOf(engine, { ...body, query: 'q', documents: ['d'] }, endpointNamed('rerank'))).toBeUndefined();
    }
  });
});
