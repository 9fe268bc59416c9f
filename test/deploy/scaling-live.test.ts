// The scaling signals on a real Prometheus scraping two proxies: one whose prefill is slow, one
// whose decode is. The alerts' expressions and the KEDA triggers' queries, run as Prometheus
// runs them, name the slow stage of the right pool, and only it.

import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { createProxy, type ProxyServer } from '../../src/server/proxy.js';
import type { FakeWorker } from '../../src/testing/index.js';
import { recordingLogger } from '../support/async.js';
import { kedaQueries } from '../support/exported-metrics.js';
import { eventually, fakeWorkers } from '../support/http.js';
import { type LivePrometheus, type QueryAnswer, startPrometheus, until } from '../support/prometheus.js';
import { tool } from '../support/tools.js';

const root = fileURLToPath(new URL('../..', import.meta.url));
const rules: Array<{ alert: string; expr: string }> = parse(
  readFileSync(join(root, 'deploy/kubernetes/monitoring/prometheus-rule.yaml'), 'utf8'),
).spec.groups.flatMap((group: { rules: unknown[] }) => group.rules);
const exprOf = (alert: string) => rules.find((rule) => rule.alert === alert)?.expr as string;
const prometheusTool = tool('prometheus', 'prometheus');
const fakes = fakeWorkers();
const proxies: ProxyServer[] = [];
const prefillWorkers: FakeWorker[] = [];
let prometheus: LivePrometheus | undefined;
afterEach(async () => {
  prometheus?.stop();
  await Promise.all(proxies.map((proxy) => proxy.close({ gracePeriodMs: 0, drainDelayMs: 0 })));
  // The decode calls cut by the shutdown free the KV they were to take, once the workers hear of it.
  await eventually(
    () => prefillWorkers.every((worker) => worker.ledger.outstanding().length === 0),
    'the handoffs waiting on the slow decode freed',
  );
});

/** A pool of one prefill and one decode worker behind a proxy of its own, serving `model`. */
async function poolBehindProxy(model: string, slow: 'prefill' | 'decode'): Promise<{ url: string; metrics: string }> {
  const prefill = await fakes.start({
    role: 'prefill',
    protocol: 'vllm',
    ...(slow === 'prefill' ? { tokenIntervalMs: 60_000 } : {}),
  });
  prefillWorkers.push(prefill);
  // A slow decode: one request at a time, each a minute long; the rest wait in its queue.
  const decode = await fakes.start({
    role: 'decode',
    protocol: 'vllm',
    tokens: 1,
    ...(slow === 'decode' ? { tokenIntervalMs: 60_000, maxRunning: 1 } : {}),
  });
  const proxy = createProxy({
    connector: 'vllm',
    prefill: [],
    decode: [],
    pools: [{ model: [model], prefill: [{ url: prefill.url }], decode: [{ url: decode.url }] }],
    scaling: { prefillRequests: 2, decodeRequests: 2 },
    metricsPort: 0,
    logger: recordingLogger().logger,
    // Every prompt queues on the slow stage: prefill-busy would serve some on decode alone.
    routing: { deciders: [] },
  });
  proxies.push(proxy);
  const url = await proxy.listen(0, '127.0.0.1');
  for (let i = 0; i < 4; i++) {
    void fetch(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model, messages: [{ role: 'user', content: 'word '.repeat(40) }], stream: true }),
    }).then(
      (answer) => answer.text().catch(() => ''),
      () => '',
    );
  }
  return { url, metrics: new URL(proxy.metricsUrl as string).host };
}

/** The first value an instant query answered; NaN for none. */
const firstValue = (answer: QueryAnswer): number =>
  Number((answer.data?.result[0] as { value?: [number, string] } | undefined)?.value?.[1]);

/** The label sets a query answers, as `a=b,c=d` (sorted, `instance` and `job` left out). */
async function seriesOf(expr: string): Promise<string[]> {
  const answer = await (prometheus as LivePrometheus).query(expr);
  expect(answer.status, `${expr}: ${answer.error}`).toBe('success');
  return (answer.data?.result ?? [])
    .map(({ metric }) =>
      Object.entries(metric)
        .filter(([label]) => label !== 'instance' && label !== 'job')
        .sort(([a], [b]) => a.localeCompare(b))
        .map(([label, value]) => `${label}=${value}`)
        .join(','),
    )
    .sort();
}

describe.skipIf(prometheusTool.skip)(`the scaling signals on a live Prometheus (${prometheusTool.why})`, () => {
  it('the saturated stage and the aging handoffs are named for the pool whose stage is slow, and the autoscalers read them', async () => {
    const slowPrefill = await poolBehindProxy('slow-prefill', 'prefill');
    const slowDecode = await poolBehindProxy('slow-decode', 'decode');
    prometheus = await startPrometheus([slowPrefill.metrics, slowDecode.metrics]);
    // The thresholds of a running fleet shortened to a test's seconds: a handoff past 1 s.
    const aging = exprOf('DisaggHandoffsAging').replace('> 30', '> 1').replace('> 5', '> 1');
    await until(async () => (await seriesOf(aging)).length > 0, 'a handoff aging past a second');
    await until(
      async () => (await seriesOf(exprOf('DisaggStageSaturated'))).length === 2,
      'both slow stages scraped past their set point',
    );
    expect(await seriesOf(exprOf('DisaggStageSaturated'))).toEqual([
      'pool=slow-decode,stage=decode',
      'pool=slow-prefill,stage=prefill',
    ]);
    expect(await seriesOf(aging)).toEqual(['pool=slow-decode']);
    expect(await seriesOf('disagg_stage_saturation{stage="effective"} > 1')).toHaveLength(2);
    // The KEDA triggers, for these pools and without the cluster's namespace label.
    const asHere = (query: string, pool: string) =>
      query.replace('namespace="llm", ', '').replace('pool="default"', `pool="${pool}"`);
    for (const { name, query } of kedaQueries()) {
      const pool = name.startsWith('prefill') ? 'slow-prefill' : 'slow-decode';
      const answer = await prometheus.query(asHere(query, pool));
      const value = firstValue(answer);
      if (name === 'prefill-backlog') expect(value, name).toBeGreaterThan(0);
      else expect(value, name).toBeGreaterThan(1);
      // And the other pool's stage is under its set point.
      const other = await prometheus.query(asHere(query, pool === 'slow-prefill' ? 'slow-decode' : 'slow-prefill'));
      if (name !== 'prefill-backlog') {
        expect(firstValue(other), `${name} elsewhere`).toBeLessThan(1);
      }
    }
  }, 90_000);
});
