// The monitoring deploy/ ships, checked against what the proxy exports: the Grafana dashboard
// and the Kustomize bases (rendered by kubectl, as `kubectl apply -k` would). The alert rules
// have their own tests (alerts.test.ts).
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
type Panel = {
  type: string;
  title: string;
  description?: string;
  targets?: Target[];
  fieldConfig?: { defaults: { mappings?: Array<{ options: Record<string, { text: string }> }> } };
};
const panels: Panel[] = dashboard.panels;
const targets: Target[] = panels.flatMap((panel) => panel.targets ?? []);

/** A dashboard query as Prometheus would get it from Grafana (its variables filled in). */
const asSent = (expr: string) =>
  expr.replaceAll('$__rate_interval', '1m').replaceAll('$__range', '1h').replaceAll('$pod', '.*');

/** The panels under each row, by the row's title, in the dashboard's order. */
function rows(): Map<string, Panel[]> {
  const found = new Map<string, Panel[]>();
  let current: Panel[] | undefined;
  for (const panel of panels) {
    if (panel.type === 'row') {
      expect(found.has(panel.title), `row ${panel.title} twice`).toBe(false);
      current = [];
      found.set(panel.title, current);
    } else {
      expect(current, `${panel.title} sits above every row`).toBeDefined();
      current?.push(panel);
    }
  }
  return found;
}

/** Gauges that are 1 or 0 (a state, not an amount): a line of them beside counts is unreadable. */
const ZERO_ONE = ['disagg_kv_view_trusted', 'disagg_worker_available', 'disagg_worker_circuit_state'];

/** The 0/1 gauges `expr` shows as they are, rather than counting the series in a state (`count (x == 0)`). */
const rawStates = (expr: string) =>
  ZERO_ONE.filter((name) =>
    [...expr.matchAll(new RegExp(`\\b${name}\\b`, 'g'))].some(
      (match) => !/count(\s+by\s*\([^)]*\))?\s*\(\s*$/.test(expr.slice(0, match.index)),
    ),
  );

describe('the Grafana dashboard reads the proxy in its own terms', () => {
  it('every query names metrics the proxy exports, with labels they have', async () => {
    const names = await exported();
    expect(targets.length).toBeGreaterThan(20);
    expect(targets.flatMap((target) => problems(target.expr, names))).toEqual([]);
    // A legend names only labels the query keeps.
    for (const target of targets) {
      for (const [, label] of target.legendFormat.matchAll(/\{\{(\w+)\}\}/g)) {
        expect(target.expr, `${target.legendFormat}`).toMatch(new RegExp(`\\b${label}\\b`));
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
    for (const target of targets) expect(target.expr).toContain('pod=~"$pod"');
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

  it('names each proxy by its pod, never by its address (instance, the pod IP and port)', () => {
    expect(JSON.stringify(dashboard)).not.toMatch(/\binstance\b/);
    const variable = dashboard.templating.list.find((each: { name: string }) => each.name === 'pod');
    expect(variable.definition).toBe('label_values(up{job="disagg"}, pod)');
    // A query kept per pod says which pod in its legend.
    const perPod = targets.filter((target) => /\bby\s*\([^)]*\bpod\b/.test(target.expr));
    expect(perPod.length).toBeGreaterThan(5);
    for (const target of perPod) expect(target.legendFormat, target.expr).toContain('{{pod}}');
  });

  it('gives every row panels, and tenants and limits, Redis and replicas, and the endpoint picker rows of their own', () => {
    const byRow = rows();
    for (const [title, under] of byRow) expect(under.length, title).toBeGreaterThan(0);
    const rowsReading = (metric: RegExp) =>
      [...byRow]
        .filter(([, under]) => under.some((panel) => panel.targets?.some((target) => metric.test(target.expr))))
        .map(([title]) => title);
    expect(rowsReading(/disagg_tenant_(requests|tokens)_total/)).toEqual(['Tenants and limits']);
    expect(rowsReading(/disagg_(redis_failures_total|replicas|replica_sync)/)).toEqual(['Redis and replicas']);
    expect(rowsReading(/disagg_epp_/)).toEqual(['Endpoint picker (disagg epp)']);
    expect(rowsReading(/disagg_kv_/)).toEqual(['Disaggregation', 'KV events (precise-prefix)']);
    // Four lines at most in a panel: past that, a legend is read rather than a graph.
    for (const panel of panels) expect(panel.targets?.length ?? 0, panel.title).toBeLessThanOrEqual(4);
  });

  it('draws a 0/1 gauge as a named state in a panel of its own, or counts the series in a state; never beside amounts', () => {
    const showing = panels.filter((panel) => panel.targets?.some((target) => rawStates(target.expr).length > 0));
    expect(showing.map((panel) => panel.title)).toEqual(['KV view trusted']);
    for (const panel of showing) {
      expect(panel.type).toBe('state-timeline');
      for (const target of panel.targets ?? []) expect(rawStates(target.expr), target.expr).not.toEqual([]);
      const named = Object.assign({}, ...(panel.fieldConfig?.defaults.mappings ?? []).map((each) => each.options));
      expect(Object.keys(named).sort()).toEqual(['0', '1']);
    }
    expect(rawStates('min by (worker) (disagg_kv_view_trusted{pod=~"$pod"})')).toEqual(['disagg_kv_view_trusted']);
    expect(rawStates('count by (worker) (disagg_kv_view_trusted{pod=~"$pod"} == 0)')).toEqual([]);
  });

  it('says which versions run, in a stat at the top', () => {
    const [first] = [...rows().values()];
    const versions = first?.find((panel) => panel.targets?.some((target) => target.expr.includes('disagg_build_info')));
    expect(versions?.type).toBe('stat');
    expect(versions?.targets?.[0]?.expr).toMatch(/^count by \(version, node\) \(disagg_build_info\{/);
  });

  it('has every panel say what it shows and what good looks like', () => {
    for (const panel of panels.filter((each) => each.type !== 'row')) {
      expect(panel.description, panel.title).toMatch(/^\S.{30,}\. Good: \S.{10,}[.)]$/s);
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
      // The dashboard's legends and the alerts name the pod, by the label this gives every series.
      expect(monitor.spec.podMetricsEndpoints[0].relabelings).toContainEqual({
        sourceLabels: ['__meta_kubernetes_pod_name'],
        targetLabel: 'pod',
      });
      const dashboardMap = objects.find((object) => object.kind === 'ConfigMap');
      expect(dashboardMap.metadata.labels).toMatchObject({ grafana_dashboard: '1' });
      expect(JSON.parse(dashboardMap.data['disagg.json'])).toEqual(dashboard);
      expect(objects.find((object) => object.kind === 'PrometheusRule').spec).toEqual(rule.spec);
    },
  );
});
