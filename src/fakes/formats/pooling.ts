// The pooling APIs of a fake worker, in the shapes vLLM answers them (its `serving_embedding`,
// `serving_score` and the rerank on it): deterministic numbers from the text, so that a test
// can tell two answers apart, and the 400 vLLM gives a body without the fields its request
// model requires.

import { createHash, randomUUID } from 'node:crypto';

type Body = Readonly<Record<string, unknown>>;

/** A pooling answer, or vLLM's refusal of the body. */
export type PoolingAnswer = { status: 200; body: object } | { status: 400; message: string };

/** A number in [0, 1) from `text`: the same text always scores the same. */
function unit(text: string, salt = ''): number {
  return createHash('sha256').update(`${salt}\u0000${text}`).digest().readUInt32BE(0) / 2 ** 32;
}

/** The texts of an input: one text, texts, or token ids (joined). */
function textsOf(value: unknown): string[] {
  if (typeof value === 'string') return [value];
  if (!Array.isArray(value)) return [];
  if (value.every((each) => typeof each === 'number')) return [value.join(',')];
  return value.map((each) => (typeof each === 'string' ? each : Array.isArray(each) ? each.join(',') : String(each)));
}

/** About four characters a token, at least one: what a fake counts a text as. */
const tokensOf = (texts: readonly string[]) =>
  texts.reduce((sum, text) => sum + Math.max(1, Math.ceil(text.length / 4)), 0);

/** An embedding as asked: numbers, or (`encoding_format: 'base64'`, the openai SDKs' default) little-endian float32s in base64. */
function encoded(vector: number[], format: unknown): number[] | string {
  if (format !== 'base64') return vector;
  return Buffer.from(new Float32Array(vector).buffer).toString('base64');
}

const usage = (prompt: number) => ({ prompt_tokens: prompt, total_tokens: prompt, completion_tokens: 0 });

/** `/v1/embeddings`: one vector per input (a chat's messages as one text), as vLLM answers it. */
export function embeddingsAnswer(body: Body, model: string): PoolingAnswer {
  const texts = Array.isArray(body.messages) ? [JSON.stringify(body.messages)] : textsOf(body.input);
  if (texts.length === 0) return { status: 400, message: 'input: Field required' };
  const dimensions = typeof body.dimensions === 'number' ? body.dimensions : 8;
  return {
    status: 200,
    body: {
      id: `embd-${randomUUID()}`,
      object: 'list',
      created: Math.floor(Date.now() / 1000),
      model,
      data: texts.map((text, index) => ({
        index,
        object: 'embedding',
        embedding: encoded(
          Array.from({ length: dimensions }, (_, k) => unit(text, String(k)) * 2 - 1),
          body.encoding_format,
        ),
      })),
      usage: usage(tokensOf(texts)),
    },
  };
}

/** `/v1/rerank`: the documents by relevance to the query, the first `top_n`, as vLLM answers it. */
export function rerankAnswer(body: Body, model: string): PoolingAnswer {
  if (typeof body.query !== 'string') return { status: 400, message: 'query: Field required' };
  if (!Array.isArray(body.documents)) return { status: 400, message: 'documents: Field required' };
  const documents = textsOf(body.documents);
  const ranked = documents
    .map((text, index) => ({ index, document: { text }, relevance_score: unit(text, body.query as string) }))
    .sort((a, b) => b.relevance_score - a.relevance_score);
  const topN = typeof body.top_n === 'number' && body.top_n > 0 ? body.top_n : ranked.length;
  return {
    status: 200,
    body: {
      id: `rerank-${randomUUID()}`,
      model,
      usage: { total_tokens: tokensOf([body.query, ...documents]) },
      results: ranked.slice(0, topN),
    },
  };
}

/** `/v1/score`: a score per pair of texts, as vLLM answers it. */
export function scoreAnswer(body: Body, model: string): PoolingAnswer {
  const first = textsOf(body.text_1 ?? body.data_1 ?? body.queries);
  const second = textsOf(body.text_2 ?? body.data_2 ?? body.documents);
  if (first.length === 0) return { status: 400, message: 'text_1: Field required' };
  if (second.length === 0) return { status: 400, message: 'text_2: Field required' };
  // One text against each of the others, or pairs of equal lists (vLLM's two forms).
  const pairs =
    first.length === 1
      ? second.map((text) => [first[0] as string, text])
      : first.map((text, i) => [text, second[i] ?? '']);
  return {
    status: 200,
    body: {
      id: `score-${randomUUID()}`,
      object: 'list',
      created: Math.floor(Date.now() / 1000),
      model,
      data: pairs.map(([a, b], index) => ({ index, object: 'score', score: unit(b as string, a) })),
      usage: usage(tokensOf(pairs.flat() as string[])),
    },
  };
}

/** `/v1/classify`: a label and its probabilities per input, as vLLM answers it. */
export function classifyAnswer(body: Body, model: string): PoolingAnswer {
  const texts = Array.isArray(body.messages) ? [JSON.stringify(body.messages)] : textsOf(body.input);
  if (texts.length === 0) return { status: 400, message: 'input: Field required' };
  return {
    status: 200,
    body: {
      id: `classify-${randomUUID()}`,
      object: 'list',
      created: Math.floor(Date.now() / 1000),
      model,
      data: texts.map((text, index) => {
        const positive = unit(text, 'label');
        return {
          index,
          label: positive >= 0.5 ? 'positive' : 'negative',
          probs: [1 - positive, positive],
          num_classes: 2,
        };
      }),
      usage: usage(tokensOf(texts)),
    },
  };
}

/** `/pooling`: the pooled hidden states per input (a short vector here), as vLLM answers it. */
export function poolingDataAnswer(body: Body, model: string): PoolingAnswer {
  const texts = Array.isArray(body.messages) ? [JSON.stringify(body.messages)] : textsOf(body.input);
  if (texts.length === 0) return { status: 400, message: 'input: Field required' };
  return {
    status: 200,
    body: {
      id: `pool-${randomUUID()}`,
      object: 'list',
      created: Math.floor(Date.now() / 1000),
      model,
      data: texts.map((text, index) => ({
        index,
        object: 'pooling',
        data: Array.from({ length: 4 }, (_, k) => unit(text, `p${k}`)),
      })),
      usage: usage(tokensOf(texts)),
    },
  };
}

/** `/tokenize`: a fake worker's tokens (four characters each, ids from 1,000), as vLLM shapes the answer. */
export function tokenizeAnswer(body: Body): PoolingAnswer {
  const text =
    typeof body.prompt === 'string'
      ? body.prompt
      : Array.isArray(body.messages)
        ? JSON.stringify(body.messages)
        : undefined;
  if (text === undefined) return { status: 400, message: 'prompt: Field required' };
  const pieces: string[] = [];
  for (let at = 0; at < text.length; at += 4) pieces.push(text.slice(at, at + 4));
  const tokens = pieces.map((piece) => 1000 + (Math.floor(unit(piece) * 1000) % 1000));
  return {
    status: 200,
    body: {
      count: tokens.length,
      max_model_len: 4096,
      tokens,
      token_strs: body.return_token_strs === true ? pieces : null,
    },
  };
}

/** `/detokenize`: a fake worker's text of token ids (`<id>` each), as vLLM shapes the answer. */
export function detokenizeAnswer(body: Body): PoolingAnswer {
  if (!Array.isArray(body.tokens)) return { status: 400, message: 'tokens: Field required' };
  return { status: 200, body: { prompt: body.tokens.map((id) => `<${String(id)}>`).join('') } };
}
