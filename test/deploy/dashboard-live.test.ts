// The dashboard against a real Prometheus scraping a proxy that served requests: every query
// runs without an error, and the panels an operator reads first show data. What
// monitoring.test.ts checks by reading, this checks by running.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createProxy, type ProxyServer } from '../../src/server/proxy.js';
import { expectServedCompletion, fakeWorkers } from '../support/http.js';
import { type LivePrometheus, startPrometheus, until } from '../support/prometheus.js';
import { tool } from '../support/tools.js';

const root = fileURLToPath(new URL('../..', import.meta.url));
const dashboard = JSON.parse(readFileSync(join(root, 'deploy/kubernetes/monitoring/dashboard.json'), 'utf8'));
const prometheusTool = tool('prometheus', 'prometheus');
const fakes = fakeWorkers();

type Panel = { title: string; targets?: Array<{ expr: string; legendFormat: string }> };
const panels: Panel[] = dashboard.panels.filter((panel: Panel) => panel.targets !== undefined);

/** A dashboard query as Grafana sends it, for a 1 s scrape: its variables filled in. */
const asSent = (expr: string) =>
  expr.replaceAll('$__rate_interval', '1m').replaceAll('$__range', '1m').replaceAll('$pod', '.*');

/** The proxy's pod, as the PodMonitor's relabeling names every series of it. */
const POD = 'disagg-7c9d5b8f4-x2k7q';

describe.skipIf(prometheusTool.skip)(`the dashboard on a live Prometheus (${prometheusTool.why})`, () => {
  let proxy: ProxyServer;
  let prometheus: LivePrometheus;
  const query = (expr: string) => prometheus.query(expr);

  beforeAll(async () => {
    const prefill = await fakes.start({ role: 'prefill', protocol: 'vllm' });
    const decode = await fakes.start({ role: 'decode', protocol: 'vllm', tokens: 2 });
    proxy = createProxy({
      connector: 'vllm',
      prefill: [{ url: prefill.url }],
      decode: [{ url: decode.url }],
      metricsPort: 0,
    });
    const url = await proxy.listen(0, '127.0.0.1');
    prometheus = await startPrometheus([new URL(proxy.metricsUrl as string).host], { pod: POD });
    // Requests before, between and after the scrapes: rates need two samples apart.
    await expectServedCompletion(url);
    await until(
      async () => ((await query('up{job="disagg"} == 1')).data?.result.length ?? 0) > 0,
      'Prometheus scrapes the proxy',
    );
    for (let i = 0; i < 3; i++) await expectServedCompletion(url);
    await until(
      async () => ((await query('increase(disagg_requests_total{job="disagg"}[1m]) > 0')).data?.result.length ?? 0) > 0,
      'a scrape after the requests',
    );
  }, 60_000);

  afterAll(async () => {
    prometheus?.stop();
    await proxy?.close({ gracePeriodMs: 0, drainDelayMs: 0 });
  });

  it('every query runs without an error', async () => {
    const failures: string[] = [];
    for (const panel of panels) {
      for (const target of panel.targets ?? []) {
        const answer = await query(asSent(target.expr));
        if (answer.status !== 'success') failures.push(`${panel.title}: ${answer.error}`);
      }
    }
    expect(failures).toEqual([]);
  });

  it('the panels an operator reads first show the requests just served', async () => {
    const withData: string[] = [];
    for (const panel of panels) {
      const answers = await Promise.all((panel.targets ?? []).map((target) => query(asSent(target.expr))));
      if (answers.some((answer) => (answer.data?.result.length ?? 0) > 0)) withData.push(panel.title);
    }
    expect(withData).toEqual(
      expect.arrayContaining([
        'Versions running',
        'Proxies up',
        'Requests per second',
        'Request duration',
        'Time to first token',
        'Tokens per second',
        'How requests were served',
        'Prefill and handoff',
        'Workers by pool and state',
        'In flight per worker',
        'Legs per worker',
        'Slots',
        'Admitted per tenant',
        'Replicas sharing load',
        'Queue',
        'Queue wait',
        'Memory',
        'CPU',
        'Event loop lag',
        'Stage saturation',
        'In flight per stage',
        'Prompt tokens in flight',
        'Handoffs outstanding',
        'Handoff age',
        'P/D decisions',
        'Prompt and answer lengths',
        'Saturation read from',
      ]),
    );
  });

  it('names the proxy by its pod in every legend kept per pod, and says which version it runs', async () => {
    const legends: string[] = [];
    for (const panel of panels) {
      for (const target of (panel.targets ?? []).filter((each) => each.legendFormat.includes('{{pod}}'))) {
        for (const series of (await query(asSent(target.expr))).data?.result ?? [])
          legends.push(series.metric.pod ?? '');
      }
    }
    expect(legends.length).toBeGreaterThan(3);
    expect(new Set(legends)).toEqual(new Set([POD]));
    const versions = panels.find((panel) => panel.title === 'Versions running')?.targets?.[0]?.expr ?? '';
    const { version } = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));
    expect((await query(asSent(versions))).data?.result.map((series) => series.metric)).toEqual([
      { version, node: process.version },
    ]);
  });
});
