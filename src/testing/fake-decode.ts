// How a fake decode worker answers: it takes the KV prefill committed (over HTTP, as NIXL or a
// bootstrap connection would), then streams its planned answer in the route's shape no faster
// than the client reads, or answers it whole. Apart from the HTTP dispatch of `fake-worker.ts`,
// which hands each decode call here with the engine's protocol and the fault it drew.
import type { ServerResponse } from 'node:http';
import { answerShapeAt, formatFor } from '../fakes/fake-formats.js';
import { planAnswer, promptTokens, usageOf, wantsUsage } from '../fakes/fake-plan.js';
import type { FakeProtocol, WorkerSide } from '../fakes/fake-protocol.js';
import type { FakeRequest, Fault } from '../fakes/fake-types.js';
import { stringifyJson } from '../http/json.js';
import { drained } from '../http/node-server.js';
import { request } from '../http/undici-parts.js';
import { breakingFault, breakStream, errorChunk } from './fake-faults.js';

/** What a decode call uses of its worker: the protocol modules' side, and the engine it answers as. */
export interface DecodeSide extends WorkerSide {
  readonly protocol: FakeProtocol['name'];
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
        if (!failed.inStream || body.stream !== true) return worker.answerError(res, failed.status, failed.message);
        res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
        res.write(`data: ${JSON.stringify(errorChunk(failed.status, failed.message))}\n\n`);
        record.completed = true;
        res.end('data: [DONE]\n\n');
        return;
      }
      record.kv = 'recomputed';
      await worker.computePrompt(record);
    } else {
      read = taken;
      if (taken !== 'none') record.kv = taken;
    }
  }
  if (fault?.type === 'empty') {
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
    record.completed = true;
    res.end('data: [DONE]\n\n');
    return;
  }
  const tokens = worker.options.tokens ?? 8;
  // Computed on blocks that were not this request's: what comes out is not its answer.
  const answer = read === 'stale' ? { content: Array.from({ length: tokens }, (_, i) => `stale${i} `) } : undefined;
  const remote = read !== 'none';
  const shape = answerShapeAt(record.path);
  const plan = planAnswer(body, answer ?? worker.answerFor(record), tokens, { name: worker.protocol, remote }, shape);
  if (remote && plan.prompt.asked && engine.recomputesPrompt === true) {
    // The transferred KV is not used: the prompt is computed again, here.
    record.kv = 'recomputed';
    await worker.computePrompt(record);
  }
  const interval = fault?.type === 'slow' ? fault.tokenIntervalMs : (worker.options.tokenIntervalMs ?? 0);
  const format = formatFor(record.path, worker.options.model);
  // Decode counts the whole prompt as cached: its KV came from prefill. A router must give the
  // client prefill's figure instead.
  const usage = usageOf(body, plan.completionTokens, promptTokens(body));
  if (body.stream !== true) {
    await worker.pause(interval * plan.completionTokens);
    if (res.destroyed) return;
    record.completed = true;
    if (plan.error !== undefined) return worker.answerError(res, plan.error.code, plan.error.message);
    return worker.answerJson(res, 200, format.whole(plan, usage));
  }
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
  const chunks = format.streamed(plan);
  const breaking = breakingFault(fault);
  // Counted in tokens: chat's opening chunk (the role) comes before the first.
  const opening = shape === 'chat' ? plan.choices.length : 0;
  const breakAt = breaking === undefined ? -1 : opening + (breaking.afterTokens ?? 1);
  for (const [i, chunk] of chunks.entries()) {
    if (breaking !== undefined && i === breakAt) return breakStream(res, breaking, (ms) => worker.pause(ms));
    if (i >= opening) await worker.pause(interval);
    if (res.destroyed) return;
    // As a real server does: no faster than the client reads.
    if (!res.write(`data: ${stringifyJson(chunk)}\n\n`) && !(await drained(res))) return;
  }
  if (breaking !== undefined && breakAt >= chunks.length) return breakStream(res, breaking, (ms) => worker.pause(ms));
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
