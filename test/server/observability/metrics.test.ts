import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import type { FlowEvent } from '../../../src/flow/events.js';
import { WorkerPool } from '../../../src/flow/worker-pool.js';
import { KvFollower } from '../../../src/server/fleet/kv-following.js';
import { registerKvMetrics } from '../../../src/server/observability/kv-metrics.js';
import { ProxyMetrics } from '../../../src/server/observability/metrics.js';
import { registerReplicaMetrics } from '../../../src/server/observability/replica-metrics.js';
import { recordingLogger } from '../../support/async.js';

type Named = { url: string };

function setup(admission?: ConstructorParameters<typeof ProxyMetrics>[1], shared?: Registry) {
  const prefill = new WorkerPool<Named>([{ url: 'http://p0' }]);
  const decode = new WorkerPool<Named>([{ url: 'http://d0' }, { url: 'http://d1' }]);
  const metrics = new ProxyMetrics({ prefill, decode }, admission, shared);
  /** Each series of `name` as `labels => value` (histograms: their _sum and _count). */
  const values = async (name: string, registry: Registry = metrics.registry) => {
    const metric = (await registry.getMetricsAsJSON()).find((each) => each.name === name);
    const out: Record<string, number> = {};
    for (const { labels, value, metricName } of (metric?.values ?? []) as Array<{
      labels: Record<string, string | number>;
      value: number;
      metricName?: string;
    }>) {
      if (metricName?.endsWith('_bucket')) continue;
      const suffix = metricName === undefined ? '' : metricName.slice(name.length);
      const key = Object.entries(labels)
        .map(([label, v]) => `${label}=${v}`)
        .join(',');
      out[`${suffix}${suffix && key ? ' ' : ''}${key}`] = value;
    }
    return out;
  };
  return { metrics, prefill, decode, values };
}

const event = (type: string, elapsedMs: number, fields: Record<string, unknown> = {}) =>
  ({ type, requestId: 'r', elapsedMs, late: false, ...fields }) as FlowEvent;

describe('ProxyMetrics: what /metrics says', () => {
  it("every disagg_ metric is in docs/monitoring.md's table with its type and labels, and explains itself", async () => {
    const { metrics } = setup();
    // The KV event metrics the proxy adds beside these (proxy-core registers them on the same registry).
    const kv = new KvFollower({ logger: recordingLogger().logger });
    registerKvMetrics(metrics.registers, kv, (worker) => worker.url);
    registerReplicaMetrics(metrics.registers, undefined);
    const page = readFileSync(fileURLToPath(new URL('../../../docs/monitoring.md', import.meta.url)), 'utf8');
    const documented = [...page.matchAll(/^\| `(disagg_(?!epp_)\w+)` \| (\w+) \|([^|]*)\|/gm)].map(
      ([, name, type, labels]) => ({
        name,
        type,
        labels: [...(labels ?? '').matchAll(/`(\w+)`/g)].map((m) => m[1]),
      }),
    );
    const exposed = (await metrics.registry.getMetricsAsJSON())
      .filter((metric) => metric.name.startsWith('disagg_'))
      .map((metric) => ({
        name: metric.name,
        type: String(metric.type),
        labels: [
          ...((metrics.registry.getSingleMetric(metric.name) as unknown as { labelNames: string[] }).labelNames ?? []),
        ],
        help: metric.help,
      }));
    const byName = (a: { name?: string }, b: { name?: string }) => String(a.name).localeCompare(String(b.name));
    expect(exposed.map(({ help: _, ...rest }) => rest).sort(byName)).toEqual(documented.sort(byName));
    for (const { name, help } of exposed) expect(help, name).toMatch(/^[A-Z].{20,}/);
  });

  it('latencies are bucketed from 5 ms to 600 s (the prefill deadline), gaps between chunks from 1 ms to 2.5 s', async () => {
    const { metrics } = setup();
    const bounds = async (name: string) =>
      ((await metrics.registry.getMetricsAsJSON()).find((metric) => metric.name === name)?.values ?? [])
        .filter((value) => (value as { metricName?: string }).metricName?.endsWith('_bucket'))
        .map((value) => value.labels.le);
    expect(await bounds('disagg_time_to_first_token_seconds')).toEqual([
      0.005,
      0.01,
      0.025,
      0.05,
      0.1,
      0.25,
      0.5,
      1,
      2.5,
      5,
      10,
      30,
      60,
      120,
      300,
      600,
      '+Inf',
    ]);
    expect(await bounds('disagg_inter_token_latency_seconds')).toEqual([
      0.001,
      0.0025,
      0.005,
      0.01,
      0.02,
      0.05,
      0.1,
      0.25,
      0.5,
      1,
      2.5,
      '+Inf',
    ]);
  });

  it('disagg_build_info is 1, labelled with the version disagg --version prints and the Node.js it runs on', async () => {
    const { values } = setup();
    const { version } = JSON.parse(
      readFileSync(fileURLToPath(new URL('../../../package.json', import.meta.url)), 'utf8'),
    );
    expect(await values('disagg_build_info')).toEqual({ [`version=${version},node=${process.version}`]: 1 });
  });

  it("an application's registry gets the proxy's metrics too, not its process metrics", async () => {
    const shared = new Registry();
    const { metrics, values } = setup(undefined, shared);
    metrics.retried('decode');
    expect(await values('disagg_retries_total', shared)).toEqual({ 'leg=decode': 1 });
    const names = (await shared.getMetricsAsJSON()).map((metric) => metric.name);
    expect(names.every((name) => name.startsWith('disagg_'))).toBe(true);
    expect(
      (await metrics.registry.getMetricsAsJSON()).some((metric) => metric.name === 'process_cpu_user_seconds_total'),
    ).toBe(true);
  });
});

describe('ProxyMetrics: fed by the flow', () => {
  it('durations in seconds: prefill from dispatch to completion, the handoff from first output to the KV taken, the first token, the held terminal', async () => {
    const { metrics, values } = setup();
    const listen = metrics.listener();
    listen(event('routed', 0, { strategy: 'sequential' }));
    listen(event('prefillDispatched', 10));
    listen(event('prefillFirstOutput', 260));
    listen(event('prefillCompleted', 510));
    listen(event('kvClaimed', 760));
    listen(event('firstToken', 1500));
    listen(event('terminalReleased', 1600, { heldMs: 40 }));
    listen(event('cleanupExpired', 2000, { error: new Error('gone') }));
    listen(event('settled', 2100));
    expect(await values('disagg_prefill_duration_seconds')).toEqual({ _sum: 0.5, _count: 1 });
    expect(await values('disagg_handoff_window_seconds')).toEqual({ _sum: 0.5, _count: 1 });
    expect(await values('disagg_time_to_first_token_seconds')).toEqual({ _sum: 1.5, _count: 1 });
    expect(await values('disagg_held_terminal_wait_seconds')).toEqual({ _sum: 0.04, _count: 1 });
    expect(await values('disagg_orphaned_handoffs_total')).toEqual({ '': 1 });
    expect(await values('disagg_routed_requests_total')).toEqual({ 'strategy=sequential,reason=': 1 });
  });

  it('a release of KV prefill held for a request it finished: counted by whether the decode worker freed it', async () => {
    const { metrics, values } = setup();
    const listen = metrics.listener();
    listen(event('handoffReleased', 10, { freed: true }));
    metrics.listener()(event('handoffReleased', 10, { freed: false, error: new Error('refused') }));
    metrics.listener()(event('handoffReleased', 10, { freed: true }));
    expect(await values('disagg_kv_releases_total')).toEqual({ 'result=freed': 2, 'result=failed': 1 });
  });

  it('an end without its start is not a duration; each request has a listener of its own', async () => {
    const { metrics, values } = setup();
    const first = metrics.listener();
    const second = metrics.listener();
    first(event('prefillDispatched', 100));
    first(event('prefillFirstOutput', 100));
    second(event('prefillCompleted', 300));
    second(event('kvClaimed', 300));
    second(event('routed', 0, { strategy: 'aggregated', reason: 'short-prompt' }));
    expect(await values('disagg_prefill_duration_seconds')).toEqual({ _sum: 0, _count: 0 });
    expect(await values('disagg_handoff_window_seconds')).toEqual({ _sum: 0, _count: 0 });
    expect(await values('disagg_routed_requests_total')).toEqual({ 'strategy=aggregated,reason=short-prompt': 1 });
  });

  it("a request is counted once it is answered: by the flow's verdict, else by its status and whether it finished", async () => {
    const { metrics, values } = setup();
    const res = (statusCode: number, writableFinished = true) => ({ statusCode, writableFinished });
    const judged = res(502);
    metrics.verdict(judged, 'error', 'prefill');
    metrics.answered('chat', judged);
    for (const [status, finished] of [
      [200, true],
      [399, true],
      [400, true],
      [499, true],
      [500, true],
      [200, false],
    ] as const) {
      metrics.answered('completions', res(status, finished));
    }
    expect(await values('disagg_requests_total')).toEqual({
      'route=chat,status=502,outcome=error,leg=prefill': 1,
      'route=completions,status=200,outcome=success,leg=': 1,
      'route=completions,status=399,outcome=success,leg=': 1,
      'route=completions,status=400,outcome=rejected,leg=': 1,
      'route=completions,status=499,outcome=rejected,leg=': 1,
      'route=completions,status=500,outcome=error,leg=': 1,
      'route=completions,status=200,outcome=cancelled,leg=': 1,
    });
  });

  it('a request lasts from its arrival to its answer closing, by route and outcome; buckets reach the 600 s prefill deadline', async () => {
    const { metrics, values } = setup();
    metrics.answered('completions', { statusCode: 200, writableFinished: true }, 0.4);
    metrics.answered('completions', { statusCode: 200, writableFinished: true }, 420);
    metrics.answered('chat', { statusCode: 200, writableFinished: false }, 2);
    metrics.answered('health', { statusCode: 200, writableFinished: true }, 0.001);
    expect(await values('disagg_request_duration_seconds')).toEqual({
      '_sum route=completions,outcome=success': 420.4,
      '_count route=completions,outcome=success': 2,
      '_sum route=chat,outcome=cancelled': 2,
      '_count route=chat,outcome=cancelled': 1,
    });
    const text = await metrics.registry.metrics();
    // The 420 s request is in the 600 s bucket, not only in +Inf.
    expect(text).toContain('disagg_request_duration_seconds_bucket{le="300",route="completions",outcome="success"} 1');
    expect(text).toContain('disagg_request_duration_seconds_bucket{le="600",route="completions",outcome="success"} 2');
    expect(text).toContain('disagg_time_to_first_token_seconds_bucket{le="600"} 0');
  });

  it("a finished request's legs per worker: both legs of a success or a cancellation, only the failing leg of an error", async () => {
    const { metrics, values } = setup();
    metrics.legsFinished({ prefill: 'prefill-0', decode: 'decode-0' }, 'success', undefined);
    metrics.legsFinished({ prefill: 'prefill-0', decode: 'decode-1' }, 'error', 'decode');
    metrics.legsFinished({ prefill: 'prefill-0', decode: 'decode-0' }, 'error', 'prefill');
    metrics.legsFinished({ decode: 'decode-1' }, 'cancelled', undefined);
    expect(await values('disagg_worker_legs_total')).toEqual({
      'role=prefill,worker=prefill-0,outcome=success': 1,
      'role=decode,worker=decode-0,outcome=success': 1,
      'role=decode,worker=decode-1,outcome=error': 1,
      'role=prefill,worker=prefill-0,outcome=error': 1,
      'role=decode,worker=decode-1,outcome=cancelled': 1,
    });
  });

  it('tokens as the workers reported them, by route, model and kind; cached from prompt_tokens_details', async () => {
    const { metrics, values } = setup();
    metrics.tokens('chat', 'qwen3', {
      prompt_tokens: 100,
      completion_tokens: 7,
      prompt_tokens_details: { cached_tokens: 64 },
    });
    metrics.tokens('chat', 'qwen3', { prompt_tokens: 20, completion_tokens: 3, prompt_tokens_details: null });
    metrics.tokens('completions', 'llama', { prompt_tokens: 5, completion_tokens: 0 });
    expect(await values('disagg_tokens_total')).toEqual({
      'route=chat,model=qwen3,kind=prompt': 120,
      'route=chat,model=qwen3,kind=completion': 10,
      'route=chat,model=qwen3,kind=cached': 64,
      'route=completions,model=llama,kind=prompt': 5,
    });
  });

  it('token counts that are not finite numbers are not counted', async () => {
    const { metrics, values } = setup();
    // What a sloppy engine's usage may hold: JSON.parse gives Infinity for 1e999.
    metrics.tokens('chat', 'qwen3', {
      prompt_tokens: JSON.parse('1e999') as number,
      completion_tokens: '7' as unknown as number,
      prompt_tokens_details: { cached_tokens: Number.NaN },
    });
    expect(await values('disagg_tokens_total')).toEqual({});
  });

  it('tenant tokens are counted when there are some; a request that used none adds no series', async () => {
    const { metrics, values } = setup();
    metrics.tenantTokens('chat', 0);
    expect(await values('disagg_tenant_tokens_total')).toEqual({});
    metrics.tenantTokens('chat', 12);
    expect(await values('disagg_tenant_tokens_total')).toEqual({ 'tenant=chat': 12 });
  });

  it('a leg retried is counted against its worker; one retried before any worker was chosen is not', async () => {
    const { metrics, values } = setup();
    metrics.legRetried('prefill', undefined);
    metrics.legRetried('decode', 'decode-1');
    expect(await values('disagg_worker_legs_total')).toEqual({ 'role=decode,worker=decode-1,outcome=retried': 1 });
  });

  it('failed calls to the limits Redis are counted', async () => {
    const { metrics, values } = setup();
    metrics.redisFailed();
    metrics.redisFailed();
    expect(await values('disagg_redis_failures_total')).toEqual({ '': 2 });
  });

  it('probes, scrapes and admin calls (health, ready, metrics, admin) are not requests', async () => {
    const { metrics, values } = setup();
    for (const route of ['health', 'ready', 'metrics', 'admin'])
      metrics.answered(route, { statusCode: 200, writableFinished: true }, 0.01);
    expect(await values('disagg_requests_total')).toEqual({});
    expect(await values('disagg_request_duration_seconds')).toEqual({});
  });

  it('retries by leg, queue waits, gaps between chunks and membership changes', async () => {
    const { metrics, values } = setup();
    metrics.retried('prefill');
    metrics.retried('prefill');
    metrics.queueWait(0.25);
    metrics.interToken(0.02);
    metrics.interToken(0.03);
    metrics.membershipChanged('decode', 'added', 'dns');
    expect(await values('disagg_retries_total')).toEqual({ 'leg=prefill': 2 });
    expect(await values('disagg_queue_wait_seconds')).toEqual({
      '_sum tenant=default': 0.25,
      '_count tenant=default': 1,
    });
    expect(await values('disagg_inter_token_latency_seconds')).toEqual({ _sum: 0.05, _count: 2 });
    expect(await values('disagg_worker_changes_total')).toEqual({ 'role=decode,change=added,source=dns': 1 });
  });
});

describe('ProxyMetrics: gauges read at each scrape', () => {
  it('admission: queued and admitted requests (0 without admission)', async () => {
    const admission = { active: 3, queued: 2 };
    const { values } = setup(admission);
    expect(await values('disagg_queue_depth')).toEqual({ '': 2 });
    expect(await values('disagg_admitted_requests')).toEqual({ '': 3 });
    admission.queued = 0;
    expect(await values('disagg_queue_depth')).toEqual({ '': 0 });
    const none = setup();
    expect(await none.values('disagg_queue_depth')).toEqual({ '': 0 });
    expect(await none.values('disagg_admitted_requests')).toEqual({ '': 0 });
  });

  it('requests waiting per tenant, as admission counts them at this scrape', async () => {
    let waiting: Array<readonly [string, number]> = [
      ['default', 1],
      ['chat', 3],
    ];
    const { values } = setup({ active: 0, queued: 4, queuedByTenant: () => waiting });
    expect(await values('disagg_tenant_queue_depth')).toEqual({ 'tenant=default': 1, 'tenant=chat': 3 });
    waiting = [['chat', 0]];
    expect(await values('disagg_tenant_queue_depth')).toEqual({ 'tenant=chat': 0 });
  });

  it('workers by state, in flight and in rotation, for the workers of this scrape only', async () => {
    const { prefill, decode, values } = setup();
    const [d0, d1] = decode.workers as [Named, Named];
    decode.setAvailable(d1, false);
    const lease = decode.acquire();
    const draining = prefill.workers[0] as Named;
    const prefillLease = prefill.acquire();
    void prefill.drain(draining);
    expect(await values('disagg_workers')).toEqual({
      'role=prefill,state=ready': 0,
      'role=prefill,state=down': 0,
      'role=prefill,state=draining': 1,
      'role=decode,state=ready': 1,
      'role=decode,state=down': 1,
      'role=decode,state=draining': 0,
    });
    expect(await values('disagg_in_flight_requests')).toEqual({
      'role=prefill,worker=http://p0': 1,
      'role=decode,worker=http://d0': 1,
      'role=decode,worker=http://d1': 0,
    });
    expect(await values('disagg_worker_available')).toEqual({
      'role=prefill,worker=http://p0': 0,
      'role=decode,worker=http://d0': 1,
      'role=decode,worker=http://d1': 0,
    });
    prefillLease.release();
    await decode.remove(d1);
    lease.release();
    expect(Object.keys(await values('disagg_in_flight_requests'))).toEqual(['role=decode,worker=http://d0']);
    expect(Object.keys(await values('disagg_worker_available'))).toEqual(['role=decode,worker=http://d0']);
    expect(d0).toBeDefined();
  });

  it("each worker's circuit: 1 for its state, 0 for the others; every circuit closed when no breaker is given", async () => {
    const { values } = setup();
    expect(await values('disagg_worker_circuit_state')).toEqual(
      Object.fromEntries(
        ['role=prefill,worker=http://p0', 'role=decode,worker=http://d0', 'role=decode,worker=http://d1'].flatMap(
          (worker) => [
            [`${worker},state=closed`, 1],
            [`${worker},state=open`, 0],
            [`${worker},state=half-open`, 0],
          ],
        ),
      ),
    );
    const prefill = new WorkerPool<Named>([{ url: 'http://p0' }]);
    const decode = new WorkerPool<Named>([{ url: 'http://d0' }]);
    const breaking = new ProxyMetrics({ prefill, decode }, undefined, undefined, undefined, (worker) =>
      worker.url === 'http://d0' ? 'half-open' : 'open',
    );
    const states = (await breaking.registry.getMetricsAsJSON()).find(
      (each) => each.name === 'disagg_worker_circuit_state',
    );
    expect(states?.values.filter(({ value }) => value === 1).map(({ labels }) => labels)).toEqual([
      { role: 'prefill', worker: 'http://p0', state: 'open' },
      { role: 'decode', worker: 'http://d0', state: 'half-open' },
    ]);
  });
});
