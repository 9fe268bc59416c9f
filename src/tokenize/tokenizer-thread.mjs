// A tokenizer worker thread of disagg's router (see tokenizer-pool.ts): loads a Hugging Face
// tokenizer.json and the chat template of tokenizer_config.json once, then answers
// {id, body, route} with {id, ids}, and {id, decode: ids} with {id, text} (or {id, error}). Plain JavaScript so that Node runs it as
// it is, from the sources and from dist/ alike.
//
// The encoder is Hugging Face's own Rust tokenizer (the `tokenizers` package, a prebuilt
// native addon) where it loads: 2 to 3.5 times faster than the JavaScript port, and it encodes
// on libuv's threads, several pieces at once. Where it does not load (a platform without its
// binary, an install without optional dependencies, a tokenizer.json it refuses), the
// JavaScript port `@huggingface/tokenizers` encodes the same ids.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parentPort, workerData } from 'node:worker_threads';
import { Template } from '@huggingface/jinja';

const { dir, cacheChars, native: wantNative, nativePackage = 'tokenizers' } = workerData;
const tokenizerJson = JSON.parse(readFileSync(join(dir, 'tokenizer.json'), 'utf8'));
const config = JSON.parse(readFileSync(join(dir, 'tokenizer_config.json'), 'utf8'));
const encoder = await loadEncoder();
const templateText = Array.isArray(config.chat_template)
  ? (config.chat_template.find((each) => each.name === 'default') ?? config.chat_template[0])?.template
  : config.chat_template;
const template = typeof templateText === 'string' ? new Template(templateText) : undefined;
const tokenText = (value) => (typeof value === 'string' ? value : (value?.content ?? ''));
const special = { bos_token: tokenText(config.bos_token), eos_token: tokenText(config.eos_token) };

/**
 * The encoder: `encode(texts, addSpecialTokens)` gives the ids of each text. Native first
 * (unless the pool was told not to), the JavaScript port when the native one cannot load,
 * with the reason kept for the pool's log line.
 */
async function loadEncoder() {
  let why = 'turned off';
  if (wantNative !== false) {
    try {
      const { Tokenizer } = await import(nativePackage);
      const tokenizer = Tokenizer.fromFile(join(dir, 'tokenizer.json'));
      return {
        kind: 'native',
        async encode(texts, addSpecialTokens) {
          const options = { addSpecialTokens };
          const encodings =
            texts.length === 1
              ? [await tokenizer.encode(texts[0], null, options)]
              : await tokenizer.encodeBatch(texts, options);
          return encodings.map((encoding) => encoding.getIds());
        },
        // As vLLM's /detokenize: the special tokens kept.
        decode: (ids) => tokenizer.decode(ids, false),
      };
    } catch (error) {
      why = error instanceof Error ? error.message.split('\n')[0] : String(error);
    }
  }
  const { Tokenizer } = await import('@huggingface/tokenizers');
  const tokenizer = new Tokenizer(tokenizerJson, config);
  return {
    kind: 'js',
    why,
    async encode(texts, add_special_tokens) {
      return texts.map((text) => tokenizer.encode(text, { add_special_tokens }).ids);
    },
    decode: async (ids) => (ids.length === 0 ? '' : tokenizer.decode(ids, { skip_special_tokens: false })),
  };
}

// Added (special) tokens split a text before anything else is done to it, so each piece
// between them encodes alone: a conversation's earlier turns are pieces seen before.
const added = (tokenizerJson.added_tokens ?? []).map((token) => token.content).filter((text) => text.length > 0);
const splitter =
  added.length === 0
    ? undefined
    : new RegExp(
        `(${added
          .sort((a, b) => b.length - a.length)
          .map((text) => text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'))
          .join('|')})`,
      );
const cache = new Map();
let cachedChars = 0;

// Short pieces too: a template's role headers and line ends come back in every request, and
// each one not encoded is a call to the encoder fewer (a next turn is then one call, for what
// is new). Bounded in pieces as well as in characters.
const CACHE_PIECES = 65_536;

function remember(piece, ids) {
  cache.set(piece, ids);
  cachedChars += piece.length;
  while ((cachedChars > cacheChars || cache.size > CACHE_PIECES) && cache.size > 0) {
    const [oldest] = cache.keys();
    cachedChars -= oldest.length;
    cache.delete(oldest);
  }
}

/** The ids of `pieces`, those seen before from the cache, the others encoded in one batch. */
async function encodePieces(pieces) {
  const found = pieces.map((piece) => {
    const hit = cache.get(piece);
    if (hit !== undefined) {
      cache.delete(piece);
      cache.set(piece, hit);
    }
    return hit;
  });
  const missing = [...new Set(pieces.filter((_, i) => found[i] === undefined))];
  if (missing.length > 0) {
    const encoded = await encodeMany(missing);
    const byPiece = new Map(missing.map((piece, i) => [piece, encoded[i]]));
    for (const [piece, ids] of byPiece) remember(piece, ids);
    for (const [i, piece] of pieces.entries()) found[i] ??= byPiece.get(piece);
  }
  return joined(found);
}

/**
 * The ids of consecutive pieces as one Uint32Array, whose buffer is moved to the pool's thread
 * rather than copied (a 128 KB prompt is some 100,000 ids).
 */
function joined(lists) {
  let length = 0;
  for (const ids of lists) length += ids.length;
  const out = new Uint32Array(length);
  let at = 0;
  for (const ids of lists) {
    out.set(ids, at);
    at += ids.length;
  }
  return out;
}

async function encode(text, addSpecialTokens) {
  if (addSpecialTokens) return joined(await encoder.encode([text], true));
  if (splitter === undefined) return encodePieces([text]);
  return encodePieces(text.split(splitter).filter((piece) => piece !== ''));
}

// A long piece (a pasted file, an agent's context) is cut into parts that the native encoder
// encodes at once on libuv's threads. Only where the cut cannot change an id: at a space after
// a word (not after whitespace) and before a letter, in a tokenizer whose pre-tokenizer starts
// a new word there whatever comes before
// (GPT-2's byte-level regex, and the regex Split before ByteLevel of Qwen, Llama 3, DeepSeek:
// the regex matches from the space on as it would in the whole text, and no merge crosses a
// word), with no normalizer that reads across it. Checked again at load on a sample text.
const PART_CHARS = 16_384;
const LETTER = /\p{L}/u;
const WORD_END = /\S/u;

function cutsAreSafe(json) {
  if (json.normalizer != null && json.normalizer.type !== 'NFC') return false;
  const pre = json.pre_tokenizer;
  const steps = pre?.type === 'Sequence' ? pre.pretokenizers : [pre];
  return (
    steps.length > 0 &&
    steps.some((step) => step?.type === 'ByteLevel') &&
    steps.every(
      (step) =>
        (step?.type === 'ByteLevel' && step.add_prefix_space !== true) ||
        (step?.type === 'Split' && typeof step.pattern?.Regex === 'string' && step.behavior === 'Isolated'),
    )
  );
}

/** The cuts of `text` into parts of about PART_CHARS, each at a space after a word and before a letter. */
function cutsOf(text) {
  const parts = [];
  let from = 0;
  while (text.length - from > PART_CHARS * 1.5) {
    let at = from + PART_CHARS;
    while (at < text.length - 1 && !(text[at] === ' ' && WORD_END.test(text[at - 1]) && LETTER.test(text[at + 1])))
      at++;
    if (at >= text.length - 1) break;
    parts.push(text.slice(from, at));
    from = at;
  }
  parts.push(text.slice(from));
  return parts;
}

async function cutsAgree() {
  const words = ['Der', 'schnelle', 'fox', "it's", 'naïve', 'café', '東京', 'x1', '—', 'end.', 'a\n', 'b\t'];
  let sample = '';
  for (let i = 0; sample.length < PART_CHARS * 4; i++)
    sample += `${words[(i * 7) % words.length]}${i % 9 === 0 ? '  ' : ' '}`;
  const [whole] = await encoder.encode([sample], false);
  const parts = await encoder.encode(cutsOf(sample), false);
  return parts.length > 1 && parts.flat().join(',') === Array.from(whole).join(',');
}

const cuttable = encoder.kind === 'native' && cutsAreSafe(tokenizerJson) && (await cutsAgree());

/** Encodes `pieces` (none empty): long ones in parts where that is safe, all in one batch. */
async function encodeMany(pieces) {
  if (!cuttable || pieces.every((piece) => piece.length <= PART_CHARS * 1.5)) return encoder.encode(pieces, false);
  const partsOf = pieces.map((piece) => (piece.length > PART_CHARS * 1.5 ? cutsOf(piece) : [piece]));
  const encoded = await encoder.encode(partsOf.flat(), false);
  let next = 0;
  return partsOf.map((parts) => {
    next += parts.length;
    return joined(encoded.slice(next - parts.length, next));
  });
}

/** The prompt as vLLM's chat endpoint renders it (HF apply_chat_template). */
function renderChat(body) {
  if (template === undefined) throw new Error('the tokenizer_config.json has no chat_template');
  const continueFinal = body.continue_final_message === true;
  const addGenerationPrompt = continueFinal ? false : body.add_generation_prompt !== false;
  const messages = body.messages;
  let text = template.render({
    ...special,
    ...(typeof body.chat_template_kwargs === 'object' && body.chat_template_kwargs !== null
      ? body.chat_template_kwargs
      : {}),
    messages,
    ...(Array.isArray(body.tools) ? { tools: body.tools } : {}),
    add_generation_prompt: addGenerationPrompt,
  });
  if (continueFinal) {
    // As transformers does: the text ends where the final message's content ends.
    const last = messages.at(-1);
    const content = typeof last?.content === 'string' ? last.content : '';
    const at = content === '' ? -1 : text.lastIndexOf(content);
    if (at >= 0) text = text.slice(0, at + content.length);
  }
  return text;
}

async function tokenize(body, route) {
  if (route === 'chat') return encode(renderChat(body), false);
  const prompt = route === 'generate' ? body.text : Array.isArray(body.prompt) ? body.prompt[0] : body.prompt;
  if (typeof prompt !== 'string') return undefined;
  // vLLM's completions add the tokenizer's special tokens (a BOS where it has one).
  return encode(prompt, body.add_special_tokens !== false);
}

parentPort.on('message', ({ id, body, route, decode }) => {
  if (decode !== undefined) {
    encoder.decode(decode).then(
      (text) => parentPort.postMessage({ id, text }),
      (error) => parentPort.postMessage({ id, error: error instanceof Error ? error.message : String(error) }),
    );
    return;
  }
  tokenize(body, route).then(
    (ids) => parentPort.postMessage({ id, ids }, ids === undefined ? [] : [ids.buffer]),
    (error) => parentPort.postMessage({ id, error: error instanceof Error ? error.message : String(error) }),
  );
});
parentPort.postMessage({ ready: true, encoder: encoder.kind, why: encoder.why, parts: cuttable });
