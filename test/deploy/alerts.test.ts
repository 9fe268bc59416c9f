// The alert rules deploy/ ships (deploy/kubernetes/monitoring/prometheus-rule.yaml): each run by
// promtool against series that must fire it and series that must not, every metric they name
// checked against what the proxy exports.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { parse, parseAllDocuments } from 'yaml';
import type { OverloadedError } from '../../src/server/pipeline/admission.js';
import { firing, promtoolCheck, promtoolTest, ruleGroups, ruleNamed, rules } from '../support/alert-rules.js';
import { exported, problems } from '../support/exported-metrics.js';
import { tool } from '../support/tools.js';

const root = fileURLToPath(new URL('../..', import.meta.url));
const promtool = tool('promtool', 'prometheus');

/**
 * Each limit a refusal names (the outcome of disagg_tenant_requests_total), as the proxy's lack
 * of room or the tenant's own limit. A new limit fails to compile here until it is placed.
 */
const REFUSED_FOR: Record<OverloadedError['limit'], 'capacity' | 'own limit'> = {
  capacity: 'capacity',
  shed: 'capacity',
  queue_timeout: 'capacity',
  // No worker predicted to meet a sheddable request's service levels: the fleet's lack of room.
  slo: 'capacity',
  max_concurrent: 'own limit',
  requests_per_minute: 'own limit',
  tokens_per_minute: 'own limit',
};

/** The outcomes a rule's `outcome=~"..."` matches. */
function outcomesOf(alert: string): string[] {
  const matcher = /outcome=~"([^"]+)"/.exec(ruleNamed(alert).expr);
  return (matcher?.[1] ?? '').split('|').sort();
}

describe('the alert rules', () => {
  it('cover what an operator must hear of, each with a severity, a summary, a description and its runbook', () => {
    expect(rules.map((each) => each.alert)).toEqual([
      'DisaggNoPrefillInRotation',
      'DisaggNoDecodeInRotation',
      'DisaggWorkerCircuitOpen',
      'DisaggHighErrorRatio',
      'DisaggKvStranded',
      'DisaggQueueFull',
      'DisaggShedding',
      'DisaggTenantOverLimit',
      'DisaggStageSaturated',
      'DisaggHandoffsAging',
      'DisaggSlowFirstToken',
      'DisaggKvEventsStalled',
      'DisaggRedisFailing',
      'DisaggProxyDown',
      'DisaggNoProxyUp',
    ]);
    for (const each of rules) {
      expect(each.labels.severity, each.alert).toMatch(/^(critical|warning|info)$/);
      expect(each.annotations.summary, each.alert).toBeTruthy();
      expect(each.annotations.description, each.alert).toBeTruthy();
      expect(each.annotations.runbook_url, each.alert).toBe(`docs/alerts.md#${each.alert.toLowerCase()}`);
    }
  });

  it('name only metrics the proxy exports (or the up series Prometheus makes), with labels they have', async () => {
    const names = await exported();
    expect(rules.flatMap((each) => problems(each.expr, names))).toEqual([]);
  });

  it('tell capacity refusals (DisaggShedding) from a tenant held to its own limits (DisaggTenantOverLimit), every limit one or the other', () => {
    const limits = (kind: string) =>
      Object.entries(REFUSED_FOR)
        .filter(([, each]) => each === kind)
        .map(([limit]) => limit)
        .sort();
    expect(outcomesOf('DisaggShedding')).toEqual(limits('capacity'));
    expect(outcomesOf('DisaggTenantOverLimit')).toEqual(limits('own limit'));
  });

  it("select the proxy's own scrape job: the one the PodMonitor names by the pods' label", () => {
    const monitor = parse(readFileSync(join(root, 'deploy/kubernetes/monitoring/pod-monitor.yaml'), 'utf8'));
    const pod = parseAllDocuments(readFileSync(join(root, 'deploy/kubernetes/proxy/disagg.yaml'), 'utf8'))
      .map((document) => document.toJSON())
      .find((object) => object.kind === 'Deployment').spec.template;
    // Without jobLabel the operator would name the job <namespace>/disagg, which an overlay changes.
    const job = pod.metadata.labels[monitor.spec.jobLabel];
    expect(job).toBe('disagg');
    const selecting = rules.filter((each) => /\bup\{/.test(each.expr));
    expect(selecting.map((each) => each.alert)).toEqual(['DisaggProxyDown', 'DisaggNoProxyUp']);
    for (const each of selecting) expect(each.expr).toContain(`up{job="${job}"}`);
  });

  it('judge each proxy pod on its own and name it by its pod label, by its address only without one', () => {
    const perProxy = rules.filter((each) => /\binstance\b/.test(each.expr));
    expect(perProxy.length).toBeGreaterThan(8);
    for (const each of perProxy) {
      for (const [, list] of each.expr.matchAll(/\bby\s*\(([^)]*)\)/g)) {
        const labels = (list as string).split(',').map((label) => label.trim());
        if (labels.includes('instance')) expect(labels, each.alert).toContain('pod');
      }
    }
    for (const each of rules.filter((rule) => /\$labels\.(instance|pod)/.test(rule.annotations.summary ?? ''))) {
      expect(each.annotations.summary, each.alert).toContain('{{ or $labels.pod $labels.instance }}');
      expect(each.annotations.summary, each.alert).not.toMatch(/\{\{ \$labels\.instance \}\}/);
    }
  });

  it.skipIf(promtool.skip)(`are valid rules (${promtool.why})`, () => {
    expect(promtoolCheck(ruleGroups)).toContain(`SUCCESS: ${rules.length} rules found`);
  });
});

describe.skipIf(promtool.skip)(
  `the alerts fire on the series that should fire them, and on no other (${promtool.why})`,
  () => {
    it('DisaggNoPrefillInRotation and DisaggNoDecodeInRotation fire for the proxy whose side has no worker ready', () => {
      expect(
        promtoolTest([
          {
            // Proxy a loses its only prefill worker at 2m; proxy b keeps its own.
            interval: '1m',
            input_series: [
              { series: 'disagg_workers{instance="a",role="prefill",state="ready"}', values: '1 1 0x10' },
              { series: 'disagg_workers{instance="a",role="prefill",state="down"}', values: '0 0 1x10' },
              { series: 'disagg_workers{instance="b",role="prefill",state="ready"}', values: '1x12' },
              { series: 'disagg_workers{instance="a",role="decode",state="ready"}', values: '1x12' },
              { series: 'disagg_workers{instance="b",role="decode",state="ready"}', values: '1x5 0x6' },
            ],
            alert_rule_test: [
              { eval_time: '3m', alertname: 'DisaggNoPrefillInRotation', exp_alerts: [] },
              {
                eval_time: '5m',
                alertname: 'DisaggNoPrefillInRotation',
                exp_alerts: [
                  firing(
                    'DisaggNoPrefillInRotation',
                    { instance: 'a', severity: 'critical' },
                    'disagg a has no prefill worker in rotation',
                  ),
                ],
              },
              { eval_time: '5m', alertname: 'DisaggNoDecodeInRotation', exp_alerts: [] },
              {
                eval_time: '8m',
                alertname: 'DisaggNoDecodeInRotation',
                exp_alerts: [
                  firing(
                    'DisaggNoDecodeInRotation',
                    { instance: 'b', severity: 'critical' },
                    'disagg b has no decode worker in rotation: it serves nothing',
                  ),
                ],
              },
            ],
          },
        ]),
      ).toContain('SUCCESS');
    });

    it('DisaggHighErrorRatio, DisaggKvStranded and DisaggQueueFull fire for the proxy that fails, strands KV or fills its queue', () => {
      expect(
        promtoolTest([
          {
            // Proxy a fails 10% of its requests, proxy b 1%; a's prefill orphans a handoff at 3m
            // (no failed release has a series at all); b's queue is full from 2m.
            interval: '1m',
            input_series: [
              {
                series: 'disagg_requests_total{instance="a",route="chat",status="200",outcome="success"}',
                values: '0+90x20',
              },
              {
                series: 'disagg_requests_total{instance="a",route="chat",status="502",outcome="error",leg="decode"}',
                values: '0+10x20',
              },
              {
                series: 'disagg_requests_total{instance="b",route="chat",status="200",outcome="success"}',
                values: '0+99x20',
              },
              {
                series: 'disagg_requests_total{instance="b",route="chat",status="429",outcome="rejected"}',
                values: '0x2 0+5x18',
              },
              { series: 'disagg_orphaned_handoffs_total{instance="a"}', values: '0 0 0 1x18' },
              { series: 'disagg_orphaned_handoffs_total{instance="b"}', values: '0x20' },
              { series: 'disagg_queue_depth{instance="b"}', values: '3 3 1024x18' },
              { series: 'disagg_admission_limit{instance="b",limit="queue"}', values: '1024x20' },
              { series: 'disagg_admission_limit{instance="b",limit="in_flight"}', values: '1024x20' },
              { series: 'disagg_queue_depth{instance="a"}', values: '0x20' },
              { series: 'disagg_admission_limit{instance="a",limit="queue"}', values: '1024x20' },
            ],
            alert_rule_test: [
              {
                eval_time: '12m',
                alertname: 'DisaggHighErrorRatio',
                exp_alerts: [
                  firing(
                    'DisaggHighErrorRatio',
                    { instance: 'a', severity: 'warning' },
                    'disagg a: 10% of requests fail',
                  ),
                ],
              },
              { eval_time: '2m', alertname: 'DisaggKvStranded', exp_alerts: [] },
              {
                eval_time: '4m',
                alertname: 'DisaggKvStranded',
                exp_alerts: [
                  firing(
                    'DisaggKvStranded',
                    { instance: 'a', severity: 'warning' },
                    'disagg a left KV on prefill workers',
                  ),
                ],
              },
              { eval_time: '18m', alertname: 'DisaggKvStranded', exp_alerts: [] },
              {
                eval_time: '5m',
                alertname: 'DisaggQueueFull',
                exp_alerts: [
                  firing(
                    'DisaggQueueFull',
                    { instance: 'b', severity: 'warning' },
                    'disagg b: the queue is full, new requests get 429',
                  ),
                ],
              },
            ],
          },
        ]),
      ).toContain('SUCCESS');
    });

    it('DisaggStageSaturated and DisaggHandoffsAging fire for the pool past its set point or whose handoffs age', () => {
      expect(
        promtoolTest([
          {
            // Pool chat's prefill runs at 1.5 from the start; its decode and the default pool's
            // empty prefill side (1.0) stay at or under the set point. Chat's decode leaves a
            // handoff outstanding from 2m, aging.
            interval: '1m',
            input_series: [
              { series: 'disagg_stage_saturation{instance="a",pool="chat",stage="prefill"}', values: '1.5x20' },
              { series: 'disagg_stage_saturation{instance="b",pool="chat",stage="prefill"}', values: '1.4x20' },
              { series: 'disagg_stage_saturation{instance="a",pool="chat",stage="decode"}', values: '0.5x20' },
              { series: 'disagg_stage_saturation{instance="a",pool="chat",stage="effective"}', values: '1.5x20' },
              { series: 'disagg_stage_saturation{instance="a",pool="default",stage="prefill"}', values: '1x20' },
              { series: 'disagg_handoff_oldest_seconds{instance="a",pool="chat"}', values: '0 0 60+60x18' },
              { series: 'disagg_handoff_oldest_seconds{instance="a",pool="default"}', values: '0x20' },
            ],
            alert_rule_test: [
              { eval_time: '5m', alertname: 'DisaggStageSaturated', exp_alerts: [] },
              {
                eval_time: '12m',
                alertname: 'DisaggStageSaturated',
                exp_alerts: [
                  firing(
                    'DisaggStageSaturated',
                    { pool: 'chat', stage: 'prefill', severity: 'warning' },
                    'pool chat: prefill is past its set point (saturation 1.50)',
                  ),
                ],
              },
              { eval_time: '4m', alertname: 'DisaggHandoffsAging', exp_alerts: [] },
              {
                eval_time: '8m',
                alertname: 'DisaggHandoffsAging',
                exp_alerts: [
                  firing(
                    'DisaggHandoffsAging',
                    { pool: 'chat', severity: 'warning' },
                    'pool chat: handoffs wait for decode to take their KV',
                  ),
                ],
              },
            ],
          },
        ]),
      ).toContain('SUCCESS');
    });

    it('DisaggShedding fires for capacity refusals (a full queue, a shed, a queue timeout), never for a tenant over its own limit', () => {
      expect(
        promtoolTest([
          {
            // Proxy a refuses tenant acme's requests past its requests_per_minute: 429s, as a full
            // queue answers. Proxy b's queue is full from 2m; proxy c's waits time out from 2m.
            interval: '1m',
            input_series: [
              {
                series: 'disagg_requests_total{instance="a",route="chat",status="429",outcome="rejected"}',
                values: '0+5x20',
              },
              {
                series: 'disagg_tenant_requests_total{instance="a",tenant="acme",outcome="requests_per_minute"}',
                values: '0+5x20',
              },
              {
                series: 'disagg_tenant_requests_total{instance="a",tenant="acme",outcome="admitted"}',
                values: '0+50x20',
              },
              {
                series: 'disagg_requests_total{instance="b",route="chat",status="429",outcome="rejected"}',
                values: '0x2 0+5x18',
              },
              {
                series: 'disagg_tenant_requests_total{instance="b",tenant="default",outcome="capacity"}',
                values: '0x2 0+5x18',
              },
              {
                series: 'disagg_tenant_requests_total{instance="b",tenant="default",outcome="admitted"}',
                values: '0+50x20',
              },
              {
                series: 'disagg_tenant_requests_total{instance="c",tenant="batch",outcome="queue_timeout"}',
                values: '0x2 0+1x18',
              },
              {
                series: 'disagg_tenant_requests_total{instance="c",tenant="batch",outcome="admitted"}',
                values: '0+50x20',
              },
            ],
            alert_rule_test: [
              { eval_time: '5m', alertname: 'DisaggShedding', exp_alerts: [] },
              {
                eval_time: '10m',
                alertname: 'DisaggShedding',
                exp_alerts: ['b', 'c'].map((instance) =>
                  firing(
                    'DisaggShedding',
                    { instance, severity: 'warning' },
                    `disagg ${instance} refuses requests for lack of capacity (429)`,
                  ),
                ),
              },
              { eval_time: '10m', alertname: 'DisaggTenantOverLimit', exp_alerts: [] },
              {
                eval_time: '18m',
                alertname: 'DisaggTenantOverLimit',
                exp_alerts: [
                  firing(
                    'DisaggTenantOverLimit',
                    { tenant: 'acme', severity: 'info' },
                    'tenant acme is held to its own limits: 5 requests a minute refused',
                  ),
                ],
              },
            ],
          },
        ]),
      ).toContain('SUCCESS');
    });

    it('DisaggWorkerCircuitOpen fires for a worker that keeps failing its trials (open, half-open, open) and one kept open, not for one trip', () => {
      expect(
        promtoolTest([
          {
            // From 2m decode-0 flaps: open, on trial (half-open), its trial fails, open again; each
            // scrape sees one or the other, never closed. decode-1 trips once at 2m, then waits on
            // trial with no request to try (no failure since). decode-2 is kept open from 2m (a
            // long --breaker-open-ms). decode-3 never trips.
            interval: '1m',
            input_series: [
              ...circuit('decode-0', {
                closed: '1 1 0x18',
                open: '0 0 1 0 1 0 1 0 1 0 1 0 1 0 1 0 1 0 1 0 1',
                half: '0 0 0 1 0 1 0 1 0 1 0 1 0 1 0 1 0 1 0 1 0',
              }),
              {
                series:
                  'disagg_worker_failures_total{instance="a",role="decode",worker="decode-0",class="worker-error"}',
                values: '0 0 5+1x18',
              },
              ...circuit('decode-1', { closed: '1 1 0x18', open: '0 0 1 0x17', half: '0 0 0 1x17' }),
              {
                series:
                  'disagg_worker_failures_total{instance="a",role="decode",worker="decode-1",class="worker-error"}',
                values: '0 0 5x18',
              },
              ...circuit('decode-2', { closed: '1 1 0x18', open: '0 0 1x18', half: '0x20' }),
              {
                series: 'disagg_worker_failures_total{instance="a",role="decode",worker="decode-2",class="broken-off"}',
                values: '0 0 5x18',
              },
              ...circuit('decode-3', { closed: '1x20', open: '0x20', half: '0x20' }),
            ],
            alert_rule_test: [
              { eval_time: '5m', alertname: 'DisaggWorkerCircuitOpen', exp_alerts: [] },
              {
                eval_time: '10m',
                alertname: 'DisaggWorkerCircuitOpen',
                exp_alerts: ['decode-0', 'decode-2'].map((worker) =>
                  firing(
                    'DisaggWorkerCircuitOpen',
                    { instance: 'a', role: 'decode', worker, severity: 'warning' },
                    `decode worker ${worker} keeps failing requests (circuit open or failing its trials)`,
                  ),
                ),
              },
            ],
          },
        ]),
      ).toContain('SUCCESS');
    });

    it('a proxy pod that loses its decode workers or its scrape is named by its pod, not only its address', () => {
      const pod = 'disagg-7c9d5b8f4-x2k7q';
      const at = '10.42.0.17:9090';
      expect(
        promtoolTest([
          {
            interval: '1m',
            input_series: [
              { series: `disagg_workers{instance="${at}",pod="${pod}",role="decode",state="ready"}`, values: '0x10' },
              { series: `up{job="disagg",instance="${at}",pod="${pod}"}`, values: '0x10' },
            ],
            alert_rule_test: [
              {
                eval_time: '5m',
                alertname: 'DisaggNoDecodeInRotation',
                exp_alerts: [
                  firing(
                    'DisaggNoDecodeInRotation',
                    { instance: at, pod, severity: 'critical' },
                    `disagg ${pod} has no decode worker in rotation: it serves nothing`,
                  ),
                ],
              },
              {
                eval_time: '5m',
                alertname: 'DisaggProxyDown',
                exp_alerts: [
                  firing(
                    'DisaggProxyDown',
                    { job: 'disagg', instance: at, pod, severity: 'warning' },
                    `disagg proxy ${pod} does not answer its metrics scrape`,
                  ),
                ],
              },
            ],
          },
        ]),
      ).toContain('SUCCESS');
    });

    it('DisaggSlowFirstToken fires for the proxy whose p99 time to first token stays past 10 s', () => {
      // Proxy a: 5% of first tokens take 10 to 30 s (its p99 about 26 s); proxy b: 1% take 1 to 10 s.
      const buckets = (instance: string, counts: Record<string, number>) =>
        Object.entries(counts).map(([le, perMinute]) => ({
          series: `disagg_time_to_first_token_seconds_bucket{instance="${instance}",le="${le}"}`,
          values: `0+${perMinute}x20`,
        }));
      expect(
        promtoolTest([
          {
            interval: '1m',
            input_series: [
              ...buckets('a', { '1': 90, '10': 95, '30': 100, '+Inf': 100 }),
              ...buckets('b', { '1': 99, '10': 100, '30': 100, '+Inf': 100 }),
            ],
            alert_rule_test: [
              { eval_time: '6m', alertname: 'DisaggSlowFirstToken', exp_alerts: [] },
              {
                eval_time: '15m',
                alertname: 'DisaggSlowFirstToken',
                exp_alerts: [
                  firing(
                    'DisaggSlowFirstToken',
                    { instance: 'a', severity: 'warning' },
                    'disagg a: p99 time to first token is 26s',
                  ),
                ],
              },
            ],
          },
        ]),
      ).toContain('SUCCESS');
    });

    it("DisaggKvEventsStalled fires for a worker whose KV view stays untrusted, not for a replay's moment", () => {
      expect(
        promtoolTest([
          {
            // Proxy a never trusts prefill-0's view from 2m (no events come); proxy b's view of it
            // is untrusted for one scrape while lost events are replayed.
            interval: '1m',
            input_series: [
              { series: 'disagg_kv_view_trusted{instance="a",worker="prefill-0"}', values: '1 1 0x10' },
              { series: 'disagg_kv_view_trusted{instance="a",worker="prefill-1"}', values: '1x12' },
              { series: 'disagg_kv_view_trusted{instance="b",worker="prefill-0"}', values: '1 1 0 1x9' },
            ],
            alert_rule_test: [
              { eval_time: '3m', alertname: 'DisaggKvEventsStalled', exp_alerts: [] },
              {
                eval_time: '6m',
                alertname: 'DisaggKvEventsStalled',
                exp_alerts: [
                  firing(
                    'DisaggKvEventsStalled',
                    { instance: 'a', worker: 'prefill-0', severity: 'warning' },
                    "disagg a cannot see worker prefill-0's KV cache",
                  ),
                ],
              },
            ],
          },
        ]),
      ).toContain('SUCCESS');
    });

    it('DisaggRedisFailing fires while calls to Redis keep failing (limits or sync rounds), not for one missed round', () => {
      expect(
        promtoolTest([
          {
            // From 2m proxy a's limits and sync rounds fail; proxy c has no limited tenant and
            // only its sync rounds fail; proxy b misses one round at 2m.
            interval: '1m',
            input_series: [
              { series: 'disagg_redis_failures_total{instance="a"}', values: '0 0 0+10x18' },
              { series: 'disagg_replica_sync_failures_total{instance="a"}', values: '0 0 0+60x18' },
              { series: 'disagg_redis_failures_total{instance="b"}', values: '0x20' },
              { series: 'disagg_replica_sync_failures_total{instance="b"}', values: '0 0 1x18' },
              { series: 'disagg_redis_failures_total{instance="c"}', values: '0x20' },
              { series: 'disagg_replica_sync_failures_total{instance="c"}', values: '0 0 0+60x18' },
            ],
            alert_rule_test: [
              { eval_time: '4m', alertname: 'DisaggRedisFailing', exp_alerts: [] },
              {
                eval_time: '8m',
                alertname: 'DisaggRedisFailing',
                exp_alerts: ['a', 'c'].map((instance) =>
                  firing(
                    'DisaggRedisFailing',
                    { instance, severity: 'warning' },
                    `disagg ${instance} cannot reach Redis`,
                  ),
                ),
              },
            ],
          },
        ]),
      ).toContain('SUCCESS');
    });

    it('DisaggProxyDown fires for a proxy pod Prometheus cannot scrape, DisaggNoProxyUp when none is up or there is none', () => {
      const up = (instance: string, values: string, job = 'disagg') => ({
        series: `up{job="${job}",instance="${instance}"}`,
        values,
      });
      const noneUp = firing(
        'DisaggNoProxyUp',
        // absent() of a comparison keeps no label of its selector.
        { severity: 'critical' },
        'no disagg proxy is up: nothing serves requests',
      );
      expect(
        promtoolTest([
          {
            // Pod b stops answering at 2m; a keeps serving; another job's target is down.
            interval: '1m',
            input_series: [up('a', '1x10'), up('b', '1 1 0x8'), up('x', '0x10', 'other')],
            alert_rule_test: [
              { eval_time: '3m', alertname: 'DisaggProxyDown', exp_alerts: [] },
              {
                eval_time: '5m',
                alertname: 'DisaggProxyDown',
                exp_alerts: [
                  firing(
                    'DisaggProxyDown',
                    { job: 'disagg', instance: 'b', severity: 'warning' },
                    'disagg proxy b does not answer its metrics scrape',
                  ),
                ],
              },
              { eval_time: '8m', alertname: 'DisaggNoProxyUp', exp_alerts: [] },
            ],
          },
          {
            // At 2m pod a crashes (its target stays, down) and pod b is gone (no series at all).
            interval: '1m',
            input_series: [up('a', '1 1 0x8'), up('b', '1 1 stale')],
            alert_rule_test: [
              { eval_time: '3m', alertname: 'DisaggNoProxyUp', exp_alerts: [] },
              { eval_time: '5m', alertname: 'DisaggNoProxyUp', exp_alerts: [noneUp] },
            ],
          },
          {
            // Nothing of disagg scraped at all: the PodMonitor selects no pod.
            interval: '1m',
            input_series: [up('x', '1x10', 'other')],
            alert_rule_test: [{ eval_time: '5m', alertname: 'DisaggNoProxyUp', exp_alerts: [noneUp] }],
          },
        ]),
      ).toContain('SUCCESS');
    });
  },
);

/** A decode worker's circuit on proxy a: the three series of its state, as values over time. */
function circuit(worker: string, values: { closed: string; open: string; half: string }) {
  const series = (state: string) =>
    `disagg_worker_circuit_state{instance="a",role="decode",worker="${worker}",state="${state}"}`;
  return [
    { series: series('closed'), values: values.closed },
    { series: series('open'), values: values.open },
    { series: series('half-open'), values: values.half },
  ];
}
