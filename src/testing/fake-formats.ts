// The answers of the fake workers, in the JSON shapes of each route as vLLM and SGLang send
// them: OpenAI completions and chat completions (streamed chunks, usage, whole answers) and
// SGLang's /generate.
import { randomUUID } from 'node:crypto';

/** Whether a streamed request asked for a usage chunk at the end. */
export function wantsUsage(body: Record<string, unknown>): boolean {
  return (body.stream_options as { include_usage?: unknown } | undefined)?.include_usage === true;
}

function promptTokens(body: Record<string, unknown>): number {
  const text = typeof body.prompt === 'string' ? body.prompt : JSON.stringify(body.messages ?? body.text ?? '');
  return Math.max(1, Math.ceil(text.length / 4));
}

/** The usage of an answer of `completion` tokens to `body`. */
export function usageOf(body: Record<string, unknown>, completion: number) {
  const prompt = promptTokens(body);
  return { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion };
}

/** The one-token answer of a prefill call, in the shape of its route. */
export function oneTokenAnswer(record: { path: string; body: Record<string, unknown> }, model: string | undefined) {
  const prompt = promptTokens(record.body);
  const usage = {
    prompt_tokens: prompt,
    completion_tokens: 1,
    total_tokens: prompt + 1,
    prompt_tokens_details: { cached_tokens: Math.floor(prompt / 2) },
  };
  return formatFor(record.path, model).whole(1, 'length', usage);
}

/** The JSON shapes of one route's answers. */
export interface Format {
  opening(): object | undefined;
  chunk(index: number, finish: string | null, usage?: object): object;
  usage(usage: object): object;
  whole(count: number, finish: string, usage: object): object;
}

const text = (count: number) => Array.from({ length: count }, (_, i) => `tok${i} `).join('');

/** The JSON shapes of each route: OpenAI completions, chat completions, SGLang's /generate. */
export function formatFor(path: string, model = 'fake-model'): Format {
  const id = `fake-${randomUUID()}`;
  const created = Math.floor(Date.now() / 1000);
  if (path === '/v1/chat/completions') {
    return {
      opening: () => ({
        id,
        object: 'chat.completion.chunk',
        created,
        model,
        choices: [{ index: 0, delta: { role: 'assistant', content: '' }, finish_reason: null }],
      }),
      chunk: (index, finish, usage) => ({
        id,
        object: 'chat.completion.chunk',
        created,
        model,
        choices: [{ index: 0, delta: finish === null ? { content: `tok${index} ` } : {}, finish_reason: finish }],
        ...(usage === undefined ? {} : { usage }),
      }),
      usage: (usage) => ({ id, object: 'chat.completion.chunk', created, model, choices: [], usage }),
      whole: (count, finish, usage) => ({
        id,
        object: 'chat.completion',
        created,
        model,
        choices: [{ index: 0, message: { role: 'assistant', content: text(count) }, finish_reason: finish }],
        usage,
      }),
    };
  }
  if (path === '/generate') {
    return {
      opening: () => undefined,
      chunk: (index, finish, usage) => ({
        text: text(finish === null ? index + 1 : index),
        meta_info: {
          id,
          finish_reason: finish === null ? null : { type: finish },
          prompt_tokens: (usage as { prompt_tokens?: number } | undefined)?.prompt_tokens ?? 0,
          completion_tokens: finish === null ? index + 1 : index,
        },
      }),
      usage: (usage) => ({ text: '', meta_info: { id, finish_reason: null, ...usage } }),
      whole: (count, finish, usage) => ({
        text: text(count),
        meta_info: {
          id,
          finish_reason: { type: finish },
          prompt_tokens: (usage as { prompt_tokens: number }).prompt_tokens,
          completion_tokens: count,
        },
      }),
    };
  }
  return {
    opening: () => undefined,
    chunk: (index, finish, usage) => ({
      id,
      object: 'text_completion',
      created,
      model,
      choices: [{ index: 0, text: finish === null ? `tok${index} ` : '', finish_reason: finish }],
      ...(usage === undefined ? {} : { usage }),
    }),
    usage: (usage) => ({ id, object: 'text_completion', created, model, choices: [], usage }),
    whole: (count, finish, usage) => ({
      id,
      object: 'text_completion',
      created,
      model,
      choices: [{ index: 0, text: text(count), finish_reason: finish }],
      usage,
    }),
  };
}
