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
const targets: Target[] = dashboard.panels.flatMap((panel: { targets?: Target[] }) => panel.targets ?? []);

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
