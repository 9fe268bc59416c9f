// What both parts of npm run bench:routing share: a seeded generator, percentiles, and the
// client that plays sessions of requests against a proxy and reads what the workers reported.
import { Agent } from 'undici';

/** A seeded generator, so that every policy meets the same requests. */
export function random(seed) {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export const percentile = (values, p) => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
};

/**
 * Plays `sessions` (lists of turns sent one after another) with `concurrency` clients, each
 * taking the next session; `send(turn, dispatcher, session)` makes one streamed request
 * (undici's `request`; `session` the session's index). Returns the TTFTs, the cached share of
 * prompt tokens the workers reported, the imbalance over `prefill` workers (by
 * `x-disagg-prefill-worker`), the stickiness (the share of turns after a session's first on the
 * prefill worker of its turn before) and the failures.
 */
export async function driveSessions({ sessions, concurrency, prefill, send }) {
  const dispatcher = new Agent({ connections: concurrency * 2 });
  const ttft = [];
  const byWorker = new Map();
  let cached = 0;
  let prompt = 0;
  let failures = 0;
  let next = 0;
  let followed = 0;
  let stayed = 0;
  const one = async (turn, session, previous) => {
    const started = performance.now();
    const { statusCode, headers, body } = await send(turn, dispatcher, session);
    let first;
    let text = '';
    for await (const chunk of body) {
      first ??= performance.now();
      text += chunk;
    }
    if (statusCode !== 200) {
      failures++;
      return previous;
    }
    ttft.push(first - started);
    const worker = String(headers['x-disagg-prefill-worker']);
    if (previous !== undefined) {
      followed++;
      if (worker === previous) stayed++;
    }
    byWorker.set(worker, (byWorker.get(worker) ?? 0) + 1);
    const usageLine = text.split('\n').findLast((line) => line.includes('"usage"'));
    const usage = usageLine === undefined ? undefined : JSON.parse(usageLine.slice(6)).usage;
    prompt += usage?.prompt_tokens ?? 0;
    cached += usage?.prompt_tokens_details?.cached_tokens ?? 0;
    return worker;
  };
  const client = async () => {
    while (next < sessions.length) {
      const session = next++;
      let previous;
      for (const turn of sessions[session]) previous = await one(turn, session, previous);
    }
  };
  await Promise.all(Array.from({ length: concurrency }, client));
  await dispatcher.close();
  const counts = [...byWorker.values()];
  while (counts.length < prefill) counts.push(0);
  const mean = counts.reduce((a, b) => a + b, 0) / prefill;
  return {
    ttft,
    hit: cached / prompt,
    imbalance: Math.max(...counts) / mean,
    stickiness: followed === 0 ? Number.NaN : stayed / followed,
    requests: ttft.length,
    failures,
  };
}
