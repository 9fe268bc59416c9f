// The monitoring deploy/ ships, checked against what the proxy exports: the Grafana dashboard,
// the Prometheus alert rules (parsed and run by promtool against series that must and must
// not fire them) and the Kustomize bases (rendered by kubectl, as `kubectl apply -k` would).
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { parse, parseAllDocuments, stringify } from 'yaml';
import { exported, problems } from '../support/exported-metrics.js';
import { run, tool } from '../support/tools.js';

const root = fileURLToPath(new URL('../..', import.meta.url));
const monitoring = join(root, 'deploy/kubernetes/monitoring');
const dashboard = JSON.parse(readFileSync(join(monitoring, 'dashboard.json'), 'utf8'));
const rule = parse(readFileSync(join(monitoring, 'prometheus-rule.yaml'), 'utf8'));
const promtool = tool('promtool', 'prometheus');
const kubectl = tool('kubectl', 'kubernetes-client');

type Target = { expr: string; legendFormat: string };
const targets: Target[] = dashboard.panels.flatMap((panel: { targets?: Target[] }) => panel.targets ?? []);
type Rule = {
  alert: string;
  expr: string;
  for?: string;
  labels: Record<string, string>;
  annotations: Record<string, string>;
};
const rules: Rule[] = rule.spec.groups.flatMap((group: { rules: Rule[] }) => group.rules);

/** A dashboard query as Prometheus would get it from Grafana (its variables filled in). */
const asSent = (expr: string) =>
  expr.replaceAll('$__rate_interval', '1m').replaceAll('$__range', '1h').replaceAll('$instance', '.*');

describe('the Grafana dashboard reads the proxy in its own terms', () => {
  it('every query names metrics the proxy exports, with labels they have', async () => {
    const names = await exported();
    expect(targets.length).toBeGreaterThan(20);
    expect(targets.flatMap((target) => problems(target.expr, names))).toEqual([]);
    // A legend names only labels the query keeps.
    for (const target of targets) {
      for (const [, label] of target.legendFormat.matchAll(/\{\{(\w+)\}\}/g)) {
        expect(target.expr, `${target.legendFormat}`).toMatch(new RegExp(`\\b${label}\\b|\\{${'instance'}`));
      }
    }
  });

  it('every disagg_ metric the proxy exports is on the dashboard', async () => {
    const names = await exported();
    const onDashboard = new Set(
      targets.flatMap((target) => [...target.expr.matchAll(/\bdisagg_[a-z0-9_]+/g)].map((m) => m[0])),
    );
    const base = (name: string) => name.replace(/_(bucket|sum|count)$/, '');
    const missing = [...names.keys()]
      .filter((name) => name.startsWith('disagg_'))
      .filter((name) => ![...onDashboard].some((used) => base(used) === base(name)));
    expect(missing).toEqual([]);
  });

  it('its panels are filtered by the proxy variable and do not overlap', () => {
    for (const target of targets) expect(target.expr).toContain('instance=~"$instance"');
    const cells = new Set<string>();
    for (const panel of dashboard.panels as Array<{ gridPos: { x: number; y: number; w: number; h: number } }>) {
      const { x, y, w, h } = panel.gridPos;
      for (let row = y; row < y + h; row++)
        for (let col = x; col < x + w; col++) {
          expect(cells.has(`${row},${col}`), `cell ${row},${col}`).toBe(false);
          cells.add(`${row},${col}`);
        }
    }
  });

  it.skipIf(promtool.skip)(`every query is valid PromQL (${promtool.why})`, () => {
    const dir = mkdtempSync(join(tmpdir(), 'disagg-dashboard-'));
    const file = join(dir, 'queries.yaml');
    const record = targets.map((target, i) => ({ record: `dashboard:query_${i}`, expr: asSent(target.expr) }));
    writeFileSync(file, stringify({ groups: [{ name: 'dashboard', rules: record }] }));
    expect(run('promtool', ['check', 'rules', file])).toContain(`SUCCESS: ${targets.length} rules found`);
  });
});

describe('the alert rules', () => {
  it('cover what an operator must hear of: no prefill or decode in rotation, an open breaker, errors, stranded KV, a full queue, a saturated stage, aging handoffs', () => {
    expect(rules.map((each) => each.alert)).toEqual([
      'DisaggNoPrefillInRotation',
      'DisaggNoDecodeInRotation',
      'DisaggWorkerCircuitOpen',
      'DisaggHighErrorRatio',
      'DisaggKvStranded',
      'DisaggQueueFull',
      'DisaggShedding',
      'DisaggStageSaturated',
      'DisaggHandoffsAging',
    ]);
    for (const each of rules) {
      expect(each.labels.severity, each.alert).toMatch(/^(critical|warning)$/);
      expect(each.annotations.summary, each.alert).toBeTruthy();
      expect(each.annotations.description, each.alert).toBeTruthy();
    }
  });

  it('name only metrics the proxy exports, with labels they have', async () => {
    const names = await exported();
    expect(rules.flatMap((each) => problems(each.expr, names))).toEqual([]);
  });

  it.skipIf(promtool.skip)(`fire on the series that should fire them, and on no other (${promtool.why})`, () => {
    const dir = mkdtempSync(join(tmpdir(), 'disagg-alerts-'));
    writeFileSync(join(dir, 'rules.yaml'), stringify({ groups: rule.spec.groups }));
    expect(run('promtool', ['check', 'rules', join(dir, 'rules.yaml')])).toContain(
      `SUCCESS: ${rules.length} rules found`,
    );
    const description = (alert: string) => rules.find((each) => each.alert === alert)?.annotations.description;
    const fired = (alert: string, labels: Record<string, string>, summary: string) => ({
      exp_labels: labels,
      exp_annotations: { summary, description: description(alert) },
    });
    const tests = [
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
              fired(
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
              fired(
                'DisaggNoDecodeInRotation',
                { instance: 'b', severity: 'critical' },
                'disagg b has no decode worker in rotation: it serves nothing',
              ),
            ],
          },
        ],
      },
      {
        // decode-0's circuit opens at 2m and stays open; decode-1's stays closed.
        interval: '1m',
        input_series: [
          {
            series: 'disagg_worker_circuit_state{instance="a",role="decode",worker="decode-0",state="open"}',
            values: '0 0 1x10',
          },
          {
            series: 'disagg_worker_circuit_state{instance="a",role="decode",worker="decode-0",state="closed"}',
            values: '1 1 0x10',
          },
          {
            series: 'disagg_worker_circuit_state{instance="a",role="decode",worker="decode-1",state="open"}',
            values: '0x12',
          },
        ],
        alert_rule_test: [
          { eval_time: '5m', alertname: 'DisaggWorkerCircuitOpen', exp_alerts: [] },
          {
            eval_time: '8m',
            alertname: 'DisaggWorkerCircuitOpen',
            exp_alerts: [
              fired(
                'DisaggWorkerCircuitOpen',
                { instance: 'a', role: 'decode', worker: 'decode-0', severity: 'warning' },
                'decode worker decode-0 keeps failing requests (circuit open)',
              ),
            ],
          },
        ],
      },
      {
        // Proxy a fails 10% of its requests, proxy b 1%; a's prefill orphans a handoff at 3m
        // (no failed release has a series at all); b's queue is full from 2m and sheds.
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
              fired('DisaggHighErrorRatio', { instance: 'a', severity: 'warning' }, 'disagg a: 10% of requests fail'),
            ],
          },
          { eval_time: '2m', alertname: 'DisaggKvStranded', exp_alerts: [] },
          {
            eval_time: '4m',
            alertname: 'DisaggKvStranded',
            exp_alerts: [
              fired('DisaggKvStranded', { instance: 'a', severity: 'warning' }, 'disagg a left KV on prefill workers'),
            ],
          },
          { eval_time: '18m', alertname: 'DisaggKvStranded', exp_alerts: [] },
          {
            eval_time: '5m',
            alertname: 'DisaggQueueFull',
            exp_alerts: [
              fired(
                'DisaggQueueFull',
                { instance: 'b', severity: 'warning' },
                'disagg b: the queue is full, new requests get 429',
              ),
            ],
          },
          {
            eval_time: '10m',
            alertname: 'DisaggShedding',
            exp_alerts: [
              fired('DisaggShedding', { instance: 'b', severity: 'warning' }, 'disagg b answers 429 to some requests'),
            ],
          },
        ],
      },
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
              fired(
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
              fired(
                'DisaggHandoffsAging',
                { pool: 'chat', severity: 'warning' },
                'pool chat: handoffs wait for decode to take their KV',
              ),
            ],
          },
        ],
      },
    ];
    const file = join(dir, 'tests.yaml');
    writeFileSync(file, stringify({ rule_files: ['rules.yaml'], evaluation_interval: '1m', tests }));
    expect(run('promtool', ['test', 'rules', file], { cwd: dir })).toContain('SUCCESS');
  });
});

describe('the Kustomize bases render as kubectl apply -k would', () => {
  const render = (dir: string) =>
    parseAllDocuments(run('kubectl', ['kustomize', join(root, dir)])).map((document) => document.toJSON());
  const key = (object: { kind: string; metadata: { name: string } }) => `${object.kind}/${object.metadata.name}`;

  it.skipIf(kubectl.skip)(
    `deploy/kubernetes is the proxy's manifest and its configuration file, named by its content (${kubectl.why})`,
    () => {
      const manifest = parseAllDocuments(readFileSync(join(root, 'deploy/kubernetes/proxy/disagg.yaml'), 'utf8')).map(
        (document) => document.toJSON(),
      );
      const sorted = (objects: Array<{ kind: string; metadata: { name: string } }>) =>
        [...objects].sort((a, b) => key(a).localeCompare(key(b)));
      const rendered = render('deploy/kubernetes');
      const configMap = rendered.find((object) => object.kind === 'ConfigMap');
      expect(configMap.data).toEqual({
        'disagg.yaml': readFileSync(join(root, 'deploy/kubernetes/proxy/config/disagg.yaml'), 'utf8'),
      });
      // The Deployment mounts the ConfigMap by its hashed name; the rest is the file as written.
      const named = rendered
        .filter((object) => object !== configMap)
        .map((object) => JSON.parse(JSON.stringify(object).replaceAll(`"${configMap.metadata.name}"`, '"disagg"')));
      expect(sorted(named)).toEqual(sorted(manifest));
    },
  );

  it.skipIf(kubectl.skip)(
    `deploy/kubernetes/monitoring scrapes the proxy's pods on their metrics port and ships the dashboard and rules (${kubectl.why})`,
    () => {
      const objects = render('deploy/kubernetes/monitoring');
      expect(objects.map(key).sort()).toEqual([
        'ConfigMap/disagg-dashboard',
        'PodMonitor/disagg',
        'PrometheusRule/disagg',
      ]);
      const deployment = parseAllDocuments(readFileSync(join(root, 'deploy/kubernetes/proxy/disagg.yaml'), 'utf8'))
        .map((document) => document.toJSON())
        .find((object) => object.kind === 'Deployment');
      const pod = deployment.spec.template;
      const monitor = objects.find((object) => object.kind === 'PodMonitor');
      expect(monitor.metadata.namespace).toBe(deployment.metadata.namespace);
      for (const [label, value] of Object.entries(monitor.spec.selector.matchLabels)) {
        expect(pod.metadata.labels[label]).toBe(value);
      }
      const ports = pod.spec.containers[0].ports.map((port: { name: string }) => port.name);
      expect(ports).toContain(monitor.spec.podMetricsEndpoints[0].port);
      const dashboardMap = objects.find((object) => object.kind === 'ConfigMap');
      expect(dashboardMap.metadata.labels).toMatchObject({ grafana_dashboard: '1' });
      expect(JSON.parse(dashboardMap.data['disagg.json'])).toEqual(dashboard);
      expect(objects.find((object) => object.kind === 'PrometheusRule').spec).toEqual(rule.spec);
    },
  );
});
