// A tokenizer worker thread of disagg's router (see tokenizer-pool.ts): loads a Hugging Face
// tokenizer.json and the chat template of tokenizer_config.json once, then answers
// {id, body, route} with {id, ids} (or {id, error}). Plain JavaScript so that Node runs it as
// it is, from the sources and from dist/ alike.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parentPort, workerData } from 'node:worker_threads';
import { Template } from '@huggingface/jinja';
import { Tokenizer } from '@huggingface/tokenizers';

const { dir, cacheChars } = workerData;
const tokenizerJson = JSON.parse(readFileSync(join(dir, 'tokenizer.json'), 'utf8'));
const config = JSON.parse(readFileSync(join(dir, 'tokenizer_config.json'), 'utf8'));
const tokenizer = new Tokenizer(tokenizerJson, config);
const templateText = Array.isArray(config.chat_template)
  ? (config.chat_template.find((each) => each.name === 'default') ?? config.chat_template[0])?.template
  : config.chat_template;
const template = typeof templateText === 'string' ? new Template(templateText) : undefined;
const tokenText = (value) => (typeof value === 'string' ? value : (value?.content ?? ''));
const special = { bos_token: tokenText(config.bos_token), eos_token: tokenText(config.eos_token) };

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

function encodePiece(piece) {
  const hit = cache.get(piece);
  if (hit !== undefined) {
    cache.delete(piece);
    cache.set(piece, hit);
    return hit;
  }
  const ids = tokenizer.encode(piece, { add_special_tokens: false }).ids;
  if (piece.length >= 64) {
    cache.set(piece, ids);
    cachedChars += piece.length;
    while (cachedChars > cacheChars && cache.size > 0) {
      const [oldest] = cache.keys();
      cachedChars -= oldest.length;
      cache.delete(oldest);
    }
  }
  return ids;
}

function encode(text, addSpecialTokens) {
  if (addSpecialTokens) return tokenizer.encode(text, { add_special_tokens: true }).ids;
  if (splitter === undefined) return encodePiece(text);
  const out = [];
  for (const piece of text.split(splitter)) {
    if (piece === '') continue;
    for (const id of encodePiece(piece)) out.push(id);
  }
  return out;
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

function tokenize(body, route) {
  if (route === 'chat') return encode(renderChat(body), false);
  const prompt = route === 'generate' ? body.text : Array.isArray(body.prompt) ? body.prompt[0] : body.prompt;
  if (typeof prompt !== 'string') return undefined;
  // vLLM's completions add the tokenizer's special tokens (a BOS where it has one).
  return encode(prompt, body.add_special_tokens !== false);
}

parentPort.on('message', ({ id, body, route }) => {
  try {
    parentPort.postMessage({ id, ids: tokenize(body, route) });
  } catch (error) {
    parentPort.postMessage({ id, error: error instanceof Error ? error.message : String(error) });
  }
});
parentPort.postMessage({ ready: true });
