// What the proxy answers, read as a client reads it, and compared with what a worker answers.
import { request } from 'undici';
import { parseJson } from '../../src/http/json.js';

/** An SSE answer: its status, the JSON of each `data:` event, and whether it ended with [DONE]. */
export async function sse(base: string, path: string, body: object, headers: Record<string, string> = {}) {
  const answer = await request(`${base}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
  });
  const text = await answer.body.text();
  const events = text.split('\n\n').filter((event) => event.trim() !== '');
  const data = events.map((event) => event.replace(/^(event: \w+\n)?data: /, ''));
  const done = data.at(-1) === '[DONE]';
  return {
    status: answer.statusCode,
    events,
    payloads: (done ? data.slice(0, -1) : data).map((entry) => parseJson(entry)),
    done,
    text,
  };
}

export async function whole(base: string, path: string, body: object, headers: Record<string, string> = {}) {
  const answer = await request(`${base}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
  });
  return { status: answer.statusCode, body: parseJson(await answer.body.text()) as Record<string, unknown> };
}

/**
 * What differs between two answers of a worker to the same body whatever the path: the
 * response id and time, and the ids of tool calls (each answer makes its own).
 */
export function normalise(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(normalise);
  if (typeof value !== 'object' || value === null) return value;
  return Object.fromEntries(
    Object.entries(value).map(([key, entry]) => [key, key === 'id' || key === 'created' ? '<id>' : normalise(entry)]),
  );
}

/** The proxy's one documented change to a worker's answer: usage counts the prompt's cache where prefill ran. */
export function withPrefillCache(value: unknown, cached: number): unknown {
  if (Array.isArray(value)) return value.map((entry) => withPrefillCache(entry, cached));
  if (typeof value !== 'object' || value === null) return value;
  const out: Record<string, unknown> = {};
  for (const [key, entry] of Object.entries(value)) {
    if (key === 'usage' && typeof entry === 'object' && entry !== null) {
      const usage = entry as Record<string, unknown>;
      out[key] = {
        ...usage,
        prompt_tokens_details: { ...(usage.prompt_tokens_details as object), cached_tokens: cached },
      };
    } else if (key === 'meta_info' && typeof entry === 'object' && entry !== null && 'cached_tokens' in entry) {
      out[key] = { ...entry, cached_tokens: cached };
    } else out[key] = withPrefillCache(entry, cached);
  }
  return out;
}

/** What the fake prefill reports cached for this body: half its prompt (a quarter of its characters). */
export const prefillCached = (body: Record<string, unknown>) => {
  const text =
    typeof body.prompt === 'string' ? body.prompt : JSON.stringify(body.messages ?? body.text ?? body.prompt);
  return Math.floor(Math.max(1, Math.ceil(text.length / 4)) / 2);
};
