// Agents that chain turns on the server, through two replicas of `disagg serve` sharing one
// real redis-server as their store, read by the official openai client: a tool-using session
// chained by previous_response_id and the same by conversation. Every turn is answered, the
// workers get each turn whole (the engines stay stateless), and the turns stay on the decode
// worker holding their prefix.
import OpenAI from 'openai';
import { afterEach, describe, expect, it } from 'vitest';
import { createProxy, type ProxyOptions } from '../../../src/server/proxy.js';
import type { FakeRequest, FakeWorker } from '../../../src/testing/index.js';
import { recordingLogger } from '../../support/async.js';
import { eventuallyAsync, fakeWorkers } from '../../support/http.js';
import { startRedis } from '../../support/redis.js';
import { tool } from '../../support/tools.js';

const redisServer = tool('redis-server', 'redis-server');
const fakes = fakeWorkers();
const cleanups: Array<() => unknown> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

type Item = Record<string, unknown>;

const TOOLS = [
  { type: 'function' as const, name: 'lookup', parameters: { type: 'object', properties: {} }, strict: false },
];

/** The last item of a Responses body's input. */
function lastItem(record: FakeRequest): Item | undefined {
  const { input } = record.body;
  return Array.isArray(input) ? (input.at(-1) as Item | undefined) : undefined;
}

/**
 * A decode worker as an agent's model behaves: a tool call for a user's turn, an answer once
 * the tool's output comes back.
 */
async function fleet() {
  const answer = (record: FakeRequest) =>
    lastItem(record)?.type === 'function_call_output'
      ? { content: ['Found ', 'it.'] }
      : { toolCalls: [{ name: 'lookup', arguments: ['{"q":', '"x"}'] }] };
  const prefill = [await fakes.start({ role: 'prefill', protocol: 'vllm' })];
  const decode: FakeWorker[] = [];
  for (let i = 0; i < 3; i++) decode.push(await fakes.start({ role: 'decode', protocol: 'vllm', tokens: 8, answer }));
  return { prefill, decode };
}

/** A replica of the router over `workers`, its store at `store`. */
async function replica(workers: Awaited<ReturnType<typeof fleet>>, store: string, options: Partial<ProxyOptions> = {}) {
  const proxy = createProxy({
    connector: 'vllm',
    prefill: workers.prefill.map((worker) => ({ url: worker.url })),
    decode: workers.decode.map((worker) => ({ url: worker.url })),
    // Requests without a session go round: only the chain's session keeps a turn in place.
    selection: 'round-robin',
    prefillPolicy: 'session',
    decodePolicy: 'session',
    responses: { store },
    logger: recordingLogger().logger,
    ...options,
  });
  cleanups.push(() => proxy.close({ gracePeriodMs: 0, drainDelayMs: 0 }));
  const url = await proxy.listen(0);
  return new OpenAI({ baseURL: `${url}/v1`, apiKey: 'sk-agent', maxRetries: 0 });
}

/** An item as the workers compare it: without the ids the router or the engine gave it. */
function withoutIds(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(withoutIds);
  if (typeof value !== 'object' || value === null) return value;
  return Object.fromEntries(
    Object.entries(value)
      .filter(([key]) => key !== 'id')
      .map(([k, v]) => [k, withoutIds(v)]),
  );
}

/** An input item as the router keeps and lists it: a message in the easy form (role, content) gets its type. */
function asKept(item: Item): Item {
  return item.type === undefined && item.role !== undefined ? { type: 'message', ...item } : item;
}

/** What a client sends for the turn after `answer`: the tool's output for its call, else a new question. */
function nextInput(answer: OpenAI.Responses.Response, turn: number): Item[] {
  const call = answer.output.find((item) => item.type === 'function_call');
  if (call !== undefined && call.type === 'function_call') {
    return [{ type: 'function_call_output', call_id: call.call_id, output: `result ${turn}` }];
  }
  return [{ role: 'user', content: `question ${turn}` }];
}

/** The decode worker that served the newest request, by index. */
function servedBy(decode: readonly FakeWorker[], before: readonly number[]): number {
  return decode.findIndex((worker, i) => worker.requests.length > (before[i] ?? 0));
}

describe.skipIf(redisServer.skip)('a session chained by previous_response_id across two replicas sharing Redis', () => {
  it('answers all 10 turns of a tool-using session, each worker request holding the whole chain, 9 of 10 on the previous turn’s decode worker', async () => {
    const redis = await startRedis();
    cleanups.push(() => redis.close());
    const workers = await fleet();
    const replicas = [await replica(workers, redis.url), await replica(workers, redis.url)];
    const history: unknown[] = [];
    const homes: number[] = [];
    let previous: OpenAI.Responses.Response | undefined;
    for (let turn = 0; turn < 10; turn++) {
      const input = previous === undefined ? [{ role: 'user', content: 'Find x' }] : nextInput(previous, turn);
      const before = workers.decode.map((worker) => worker.requests.length);
      // Turn by turn on the other replica: what the first stored, the second continues.
      const client = replicas[turn % 2] as OpenAI;
      const answer = await client.responses.create({
        model: 'm',
        input: input as unknown as OpenAI.Responses.ResponseInput,
        tools: TOOLS,
        max_output_tokens: 16,
        ...(previous === undefined ? {} : { previous_response_id: previous.id }),
      });
      expect(answer.status).toBe('completed');
      const home = servedBy(workers.decode, before);
      homes.push(home);
      // The decode worker got the chain's every item before this turn's own, in order.
      const sent = workers.decode[home]?.requests.at(-1)?.body;
      expect(withoutIds(sent?.input)).toEqual(withoutIds([...history, ...input]));
      expect(sent).not.toHaveProperty('previous_response_id');
      expect(sent?.store).toBe(false);
      // And prefill the same.
      expect(withoutIds(workers.prefill[0]?.requests.at(-1)?.body.input)).toEqual(withoutIds([...history, ...input]));
      history.push(...input.map(asKept), ...answer.output);
      previous = answer;
    }
    const stayed = homes.slice(1).filter((home, i) => home === homes[i]).length;
    expect(stayed).toBeGreaterThanOrEqual(9);
    // Either replica reads the last answer and its input items.
    for (const client of replicas) {
      expect((await client.responses.retrieve((previous as OpenAI.Responses.Response).id)).status).toBe('completed');
    }
  });
});

describe.skipIf(redisServer.skip)('a session in a conversation across two replicas sharing Redis', () => {
  it('answers 10 turns, each sent with every item before it; the conversation lists every item in order; DELETE then GET is a 404', async () => {
    const redis = await startRedis();
    cleanups.push(() => redis.close());
    const workers = await fleet();
    const replicas = [await replica(workers, redis.url), await replica(workers, redis.url)];
    const conversation = await (replicas[0] as OpenAI).conversations.create({ metadata: { topic: 'x' } });
    const history: unknown[] = [];
    const homes: number[] = [];
    let previous: OpenAI.Responses.Response | undefined;
    for (let turn = 0; turn < 10; turn++) {
      const input = previous === undefined ? [{ role: 'user', content: 'Find x' }] : nextInput(previous, turn);
      const before = workers.decode.map((worker) => worker.requests.length);
      const answer = await (replicas[(turn + 1) % 2] as OpenAI).responses.create({
        model: 'm',
        input: input as unknown as OpenAI.Responses.ResponseInput,
        tools: TOOLS,
        max_output_tokens: 16,
        conversation: conversation.id,
      });
      expect(answer.status).toBe('completed');
      const home = servedBy(workers.decode, before);
      homes.push(home);
      expect(withoutIds(workers.decode[home]?.requests.at(-1)?.body.input)).toEqual(withoutIds([...history, ...input]));
      history.push(...input.map(asKept), ...answer.output);
      previous = answer;
    }
    expect(homes.slice(1).filter((home, i) => home === homes[i]).length).toBeGreaterThanOrEqual(9);
    const listed: unknown[] = [];
    for await (const item of (replicas[1] as OpenAI).conversations.items.list(conversation.id, {
      order: 'asc',
      limit: 7,
    })) {
      listed.push(item);
    }
    expect(withoutIds(listed)).toEqual(withoutIds(history));
    // Every listed item has an id of its own.
    expect(new Set(listed.map((item) => (item as Item).id)).size).toBe(history.length);
    await (replicas[0] as OpenAI).conversations.delete(conversation.id);
    const gone = await (replicas[1] as OpenAI).conversations.retrieve(conversation.id).catch((e: unknown) => e);
    expect((gone as { status?: number }).status).toBe(404);
  });
});

describe.skipIf(redisServer.skip)('a background response seen from the other replica', () => {
  it('polls to its end from either replica; cancel or a live stream from the replica not running it is a 409; once ended, either replays its stream', async () => {
    const redis = await startRedis();
    cleanups.push(() => redis.close());
    const prefill = [await fakes.start({ role: 'prefill', protocol: 'vllm' })];
    const decode = [await fakes.start({ role: 'decode', protocol: 'vllm', tokens: 200, tokenIntervalMs: 2 })];
    const [a, b] = [await replica({ prefill, decode }, redis.url), await replica({ prefill, decode }, redis.url)];
    const queued = await (a as OpenAI).responses.create({
      model: 'm',
      input: 'Go',
      background: true,
      max_output_tokens: 300,
    });
    const elsewhere = (await (b as OpenAI).responses.cancel(queued.id).catch((e: unknown) => e)) as { status?: number };
    expect(elsewhere.status).toBe(409);
    let last: OpenAI.Responses.Response = queued;
    await eventuallyAsync(async () => {
      last = await (b as OpenAI).responses.retrieve(queued.id);
      return last.status === 'completed';
    }, 'completed, seen from the other replica');
    const replayed: Array<{ type: string }> = [];
    for await (const event of await (b as OpenAI).responses.retrieve(queued.id, { stream: true })) replayed.push(event);
    expect(replayed.at(-1)?.type).toBe('response.completed');
  });
});
