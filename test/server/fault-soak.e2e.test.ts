// The attack run's load phase as a test: hundreds of concurrent streams through disagg serve
// with a fault drawn for every request (on either worker, or a client that leaves), and every
// deadline short. When it is over, every leg must have ended, every gauge be back at zero, and
// KV be left only where the injected fault made freeing it impossible.
import { Agent, request } from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import { createProxy, type ProxyServer } from '../../src/server/proxy.js';
import type { FakeRequest, FakeWorker, Fault } from '../../src/testing/index.js';
import { recordingLogger } from '../support/async.js';
import { eventually, fakeWorkers } from '../support/http.js';

const fakes = fakeWorkers();
let proxy: ProxyServer | undefined;
afterEach(async () => {
  await proxy?.close({ gracePeriodMs: 0, drainDelayMs: 0 });
  proxy = undefined;
});

const STREAMS = 400;
const KV_TIMEOUT_MS = 1500;

/** What happens to request `i`: nothing (half of them), a fault of one worker, or a client that leaves. */
type Plan = { prefill?: Fault; decode?: Fault; clientLeaves?: boolean };
const PLANS: Plan[] = [
  {},
  {},
  {},
  {},
  {},
  {},
  { decode: { type: 'reset', afterTokens: 2 } },
  { decode: { type: 'error-event', afterTokens: 1 } },
  { decode: { type: 'status', status: 500 } },
  { decode: { type: 'hang' } },
  { decode: { type: 'empty' } },
  { prefill: { type: 'status', status: 503 } },
  { prefill: { type: 'hang' } },
  { prefill: { type: 'late-failure' } },
  { clientLeaves: true },
  { decode: { type: 'slow', tokenIntervalMs: 20 }, clientLeaves: true },
];
/** A deterministic spread of the plans over the requests (a fixed permutation, not i mod n). */
const planOf = (i: number): Plan => PLANS[(i * 7 + 3) % PLANS.length] as Plan;
const indexOf = (record: FakeRequest): number => Number(String(record.body.prompt).slice('soak '.length));

/** Faults after which no router can free the prefill's KV: decode never takes it. */
const strandsKv = (plan: Plan) =>
  plan.decode?.type === 'status' || plan.decode?.type === 'hang' || plan.prefill?.type === 'late-failure';

describe('every leg ends under faults', () => {
  for (const protocol of ['vllm', 'sglang'] as const) {
    it(`${protocol}: ${STREAMS} concurrent streams with a fault drawn per request: no leg left open, gauges at zero, KV only where a fault stranded it`, async () => {
      const fault = (role: 'prefill' | 'decode') => (record: FakeRequest) => planOf(indexOf(record))[role];
      const prefill = await fakes.start({
        role: 'prefill',
        protocol,
        fault: fault('prefill'),
        kvTimeoutMs: KV_TIMEOUT_MS,
        bootstrapTimeoutMs: KV_TIMEOUT_MS,
      });
      const decode = await fakes.start({
        role: 'decode',
        protocol,
        tokens: 8,
        tokenIntervalMs: 2,
        fault: fault('decode'),
        bootstrapTimeoutMs: KV_TIMEOUT_MS,
      });
      proxy = createProxy({
        connector: protocol,
        prefill: [{ url: prefill.url, bootstrapPort: prefill.bootstrapPort }],
        decode: [{ url: decode.url }],
        logger: recordingLogger().logger,
        dispatcher: new Agent({ connections: 512 }),
        deadlines: { prefillFirstOutputMs: 500, handoffMs: 800, decodeFirstTokenMs: 500, idleMs: 500 },
        cleanupBudgetMs: 1000,
        // Neither probes nor the circuit breaker may take the one worker of each pool out after
        // injected faults: what is tested here is that every leg ends, not ejection.
        healthIntervalMs: 600_000,
        breaker: { failureThreshold: 1_000_000 },
        // Every request disaggregated, so that each leg meets the fault drawn for it.
        routing: { deciders: [] },
      });
      const url = await proxy.listen(0);
      const client = new Agent({ connections: STREAMS });
      const outcomes = await Promise.all(
        Array.from({ length: STREAMS }, async (_, i) => {
          const leaves = new AbortController();
          try {
            const answer = await request(`${url}/v1/completions`, {
              method: 'POST',
              headers: { 'content-type': 'application/json' },
              body: JSON.stringify({ model: 'fake-model', prompt: `soak ${i}`, max_tokens: 8, stream: true }),
              dispatcher: client,
              signal: leaves.signal,
            });
            let text = '';
            for await (const chunk of answer.body) {
              text += String(chunk);
              if (planOf(i).clientLeaves && text.includes('tok1')) leaves.abort();
            }
            if (answer.statusCode !== 200) return 'refused';
            return text.endsWith('data: [DONE]\n\n') ? 'complete' : 'failed in the stream';
          } catch {
            return 'left';
          }
        }),
      );
      // Requests without a fault were all served in full; none was reported as a success wrongly.
      outcomes.forEach((outcome, i) => {
        const plan = planOf(i);
        if (plan.prefill === undefined && plan.decode === undefined && plan.clientLeaves !== true) {
          expect(outcome, `request ${i}`).toBe('complete');
        } else if (plan.clientLeaves !== true) {
          expect(outcome, `request ${i} (${JSON.stringify(plan)})`).not.toBe('complete');
        }
      });
      const legs = (worker: FakeWorker) => worker.requests.filter((record) => !record.completed && !record.aborted);
      // Every leg ends: answered in full, or ended by the proxy (deadline, clean-up, failure).
      await eventually(() => legs(prefill).length === 0 && legs(decode).length === 0, 'every leg ended', 1000);
      for (const pool of [proxy.prefillWorkers, proxy.decodeWorkers]) {
        for (const worker of pool.workers) expect(pool.inFlight(worker), worker.url).toBe(0);
      }
      const metrics = await (await request(`${url}/metrics`)).body.text();
      expect(metrics.match(/^disagg_in_flight_requests\{.*\} (\d+)$/gm)?.every((line) => line.endsWith(' 0'))).toBe(
        true,
      );
      // KV: nothing held once the engine's own timeout has passed; stranded only by a fault
      // that kept decode from taking it.
      await eventually(() => prefill.ledger.outstanding().length === 0, 'no KV held', 1000);
      const byRequestId = new Map(prefill.requests.map((record) => [record.requestId, indexOf(record)]));
      const stranded = prefill.ledger.stranded().map((handoff) => byRequestId.get(handoff.requestId) as number);
      for (const i of stranded)
        expect(strandsKv(planOf(i)), `KV of request ${i} (${JSON.stringify(planOf(i))})`).toBe(true);
      if (process.env.DISAGG_SOAK_REPORT) {
        const count = (what: string) => outcomes.filter((outcome) => outcome === what).length;
        process.stderr.write(
          `${protocol}: ${STREAMS} streams: ${count('complete')} complete, ${count('refused')} refused, ${count('failed in the stream')} failed in the stream, ${count('left')} left by the client; legs open 0; in-flight 0; KV held 0, stranded ${stranded.length} (all by injected faults)\n`,
        );
      }
      fakes.leaveKv(prefill);
      await client.close();
    }, 60_000);
  }
});
