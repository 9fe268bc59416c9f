// How a fake decode worker answers: it takes the KV prefill committed (over HTTP, as NIXL or a
// bootstrap connection would), then streams its planned answer in the route's shape no faster
// than the client reads, or answers it whole. Apart from the HTTP dispatch of `fake-worker.ts`,
// which hands each decode call here with the engine's protocol and the fault it drew.
import type { ServerResponse } from 'node:http';
import type { AnswerShape } from '../endpoints/endpoint.js';
import { answerHandlerError, answerShapeAt, formatFor } from '../fakes/fake-formats.js';
import { planAnswer, promptTokens, usageOf, wantsUsage } from '../fakes/fake-plan.js';
import type { FakeProtocol, WorkerSide } from '../fakes/fake-protocol.js';
import type { SimulatedDecode } from '../fakes/fake-simulation.js';
import type { FakeRequest, Fault } from '../fakes/fake-types.js';
import { stringifyJson } from '../http/json.js';
import { drained } from '../http/node-server.js';
import { request } from '../http/undici-parts.js';
import { breakingFault, breakStream, errorChunk, typedEvent, typedEvents, typedFailure } from './fake-faults.js';

/** What a decode call uses of its worker: the protocol modules' side, and the engine it answers as. */
export interface DecodeSide extends WorkerSide {
  readonly protocol: FakeProtocol['name'];
  /** A simulated engine's pace for the answers (`FakeWorkerOptions.simulated`), if it has one. */
  readonly simulated?: SimulatedDecode | undefined;
}

/**
 * Answers one decode call: takes its KV (or fails, recomputes or reads stale blocks, as the
 * engine does), then streams or answers whole, breaking the stream as `fault` says.
 */
export async function answerDecode(
  worker: DecodeSide,
  engine: FakeProtocol,
  res: ServerResponse,
  record: FakeRequest,
  fault: Fault | undefined,
): Promise<void> {
  const { body } = record;
  const abort = new AbortController();
  res.on('close', () => abort.abort());
  if (fault?.type === 'never-bootstrap') return; // never takes the KV, never answers
  let read: 'none' | 'taken' | 'stale' = 'none';
  if (fault?.type !== 'no-claim') {
    const taken = await takeKv(engine, body, abort.signal);
    if (typeof taken === 'object') {
      if (abort.signal.aborted) {
        // Aborted before it pulled: vLLM frees the KV it would have taken at once.
        await engine.gaveUp?.(worker, body, 'aborted');
        return;
      }
      const failed = engine.kvLoadFailed?.(worker, taken.failure) ?? {
        status: 500,
        message: taken.failure,
        inStream: false,
      };
      if (failed !== 'recompute') {
        record.kv = 'failed';
        if (res.destroyed) return;
        if (!failed.inStream || body.stream !== true) {
          return answerHandlerError(worker, res, record.path, failed.status, failed.message);
        }
        res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
        record.completed = true;
        if (typedEvents(answerShapeAt(record.path))) return failTyped(worker, res, record, failed);
        res.write(`data: ${JSON.stringify(errorChunk(failed.status, failed.message))}\n\n`);
        res.end('data: [DONE]\n\n');
        return;
      }
      record.kv = 'recomputed';
      // Simulated, the prompt is computed by the job below (a whole one).
      if (worker.simulated === undefined) await worker.computePrompt(record);
    } else {
      read = taken;
      if (taken !== 'none') record.kv = taken;
    }
  }
  const shape = answerShapeAt(record.path);
  const typed = typedEvents(shape);
  if (fault?.type === 'empty') {
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
    record.completed = true;
    // The typed APIs have no `[DONE]`: their empty stream has nothing at all.
    res.end(typed ? '' : 'data: [DONE]\n\n');
    return;
  }
  const tokens = worker.options.tokens ?? worker.simulated?.tokensLeft(body) ?? 8;
  // Computed on blocks that were not this request's: what comes out is not its answer.
  const answer = read === 'stale' ? { content: Array.from({ length: tokens }, (_, i) => `stale${i} `) } : undefined;
  const remote = read !== 'none';
  const plan = planAnswer(body, answer ?? worker.answerFor(record), tokens, { name: worker.protocol, remote }, shape);
  if (remote && plan.prompt.asked && engine.recomputesPrompt === true) {
    // The transferred KV is not used: the prompt is computed again, here.
    record.kv = 'recomputed';
    if (worker.simulated === undefined) await worker.computePrompt(record);
  }
  // Simulated: the engine decodes after receiving the prefill's KV, or computes the prompt itself.
  const kind = remote && record.kv !== 'recomputed' ? 'decode' : 'whole';
  const pace = await worker.simulated?.generate(record, kind, plan.completionTokens);
  // A client gone (or a stream broken on purpose) ends the job, as the engine aborts it.
  if (pace !== undefined) res.once('close', () => pace.cancel());
  const interval = fault?.type === 'slow' ? fault.tokenIntervalMs : (worker.options.tokenIntervalMs ?? 0);
  const format = formatFor(record.path, worker.options.model);
  // Decode counts the whole prompt as cached: its KV came from prefill. A router must give the
  // client prefill's figure instead.
  const usage = usageOf(body, plan.completionTokens, promptTokens(body));
  if (body.stream !== true) {
    await (pace === undefined ? worker.pause(interval * plan.completionTokens) : pace.finished);
    if (res.destroyed) return;
    record.completed = true;
    if (plan.error !== undefined)
      return answerHandlerError(worker, res, record.path, plan.error.code, plan.error.message);
    return worker.answerJson(res, 200, format.whole(plan, usage));
  }
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
  const chunks = format.streamed(plan, usage);
  const breaking = breakingFault(fault);
  const tokenAt = tokenChunks(shape, chunks, plan.choices.length);
  const breakAt = breaking === undefined ? -1 : breakIndex(tokenAt, chunks.length, breaking.afterTokens ?? 1);
  const broken = (sent: number) =>
    breakStream(
      res,
      breaking as NonNullable<typeof breaking>,
      (ms) => worker.pause(ms),
      typed ? { shape, sent } : undefined,
    );
  for (const [i, chunk] of chunks.entries()) {
    if (breaking !== undefined && i === breakAt) return broken(i);
    if (tokenAt.has(i)) await (pace === undefined ? worker.pause(interval) : pace.next());
    if (res.destroyed) return;
    const json = stringifyJson(chunk);
    // As a real server does: no faster than the client reads.
    if (!res.write(typed ? typedEvent(chunk, json) : `data: ${json}\n\n`) && !(await drained(res))) return;
  }
  if (breaking !== undefined && breakAt >= chunks.length) return broken(chunks.length);
  if (typed) {
    // No `[DONE]` and no usage chunk: the last event says it all (or, broken, nothing does).
    record.completed = true;
    res.end(plan.error === undefined ? '' : typedFailure(shape, plan.error.message));
    return;
  }
  if (plan.error !== undefined) {
    // As vLLM does: the error as a chunk of the 200 stream, then the end.
    res.write(`data: ${JSON.stringify(errorChunk(plan.error.code, plan.error.message))}\n\n`);
  } else if (wantsUsage(body) && shape !== 'generate') {
    // As vLLM does: the usage in a chunk of its own, with no choices.
    res.write(`data: ${stringifyJson(format.usage(usage))}\n\n`);
  }
  res.write('data: [DONE]\n\n');
  record.completed = true;
  res.end();
}

/**
 * The chunks that carry a token, which the stream paces and a breaking fault counts: the typed
 * APIs' delta events (Responses' `*.delta`, Messages' `content_block_delta`); with the OpenAI
 * chunks, all but the opening (chat's role chunk per choice).
 */
function tokenChunks(shape: AnswerShape, chunks: object[], choices: number): Set<number> {
  const at = new Set<number>();
  const opening = shape === 'chat' ? choices : 0;
  for (const [i, chunk] of chunks.entries()) {
    const type = (chunk as { type?: unknown }).type;
    const token = typedEvents(shape)
      ? typeof type === 'string' && (type.endsWith('.delta') || type === 'content_block_delta')
      : i >= opening;
    if (token) at.add(i);
  }
  return at;
}

/**
 * Where a stream breaks after `tokens` tokens: before the chunk of the next token; after the
 * last token (before what closes the answer) when that was the last; otherwise past the end.
 */
function breakIndex(tokenAt: Set<number>, length: number, tokens: number): number {
  const at = [...tokenAt];
  if (tokens < at.length) return at[tokens] as number;
  const last = at.at(-1);
  return tokens === at.length && last !== undefined ? last + 1 : length + tokens - at.length;
}

/**
 * A typed stream that failed before its first token (a failed KV transfer), as vLLM's: its
 * opening events (Responses' `response.created` and `response.in_progress`, Messages'
 * `message_start`), then the failure (`typedFailure`).
 */
function failTyped(
  worker: DecodeSide,
  res: ServerResponse,
  record: FakeRequest,
  failed: { status: number; message: string },
): void {
  const shape = answerShapeAt(record.path);
  const error = { code: failed.status, message: failed.message };
  const plan = planAnswer(record.body, { content: [], error }, 0, { name: worker.protocol }, shape);
  const format = formatFor(record.path, worker.options.model);
  const opening = format
    .streamed(plan, usageOf(record.body, 0))
    .map((chunk) => typedEvent(chunk, stringifyJson(chunk)));
  res.end(`${opening.join('')}${typedFailure(shape, failed.message)}`);
}

/**
 * Takes the KV prefill committed (every handoff the body names): `none` when it names none,
 * `taken`, `stale` when some of it had already been freed, or why the transfer failed.
 */
async function takeKv(
  engine: FakeProtocol,
  body: Record<string, unknown>,
  signal: AbortSignal,
): Promise<'none' | 'taken' | 'stale' | { failure: string }> {
  const sources = engine.kvSources(body);
  if (sources.length === 0) return 'none';
  const reads = await Promise.all(
    sources.map(async (source) => {
      try {
        const answer = await request(source.url, { method: 'POST', body: JSON.stringify(source.payload), signal });
        const text = await answer.body.text();
        if (answer.statusCode !== 200) return { failure: `KV transfer failed: ${text}` };
        return (JSON.parse(text) as { read?: string }).read === 'stale' ? 'stale' : 'taken';
      } catch (error) {
        return { failure: `KV transfer failed: ${String(error)}` };
      }
    }),
  );
  return reads.find((read) => typeof read === 'object') ?? (reads.includes('stale') ? 'stale' : 'taken');
}
