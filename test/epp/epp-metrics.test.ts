import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import type { Pick } from '../../src/epp/endpoint-picker.js';
import { EppMetrics } from '../../src/epp/epp-metrics.js';

describe("the endpoint picker's metrics", () => {
  it("are docs/monitoring.md's table of them, with their types and labels, each explaining itself", async () => {
    const registry = new Registry();
    new EppMetrics([registry]);
    const page = readFileSync(fileURLToPath(new URL('../../docs/monitoring.md', import.meta.url)), 'utf8');
    const documented = [...page.matchAll(/^\| `(disagg_epp_\w+)` \| (\w+) \|([^|]*)\|/gm)].map(
      ([, name, type, labels]) => ({
        name,
        type,
        labels: [...(labels ?? '').matchAll(/`(\w+)`/g)].map((m) => m[1]),
      }),
    );
    const exposed = (await registry.getMetricsAsJSON()).map((metric) => ({
      name: metric.name,
      type: String(metric.type),
      labels: [...((registry.getSingleMetric(metric.name) as unknown as { labelNames: string[] }).labelNames ?? [])],
    }));
    expect(exposed).toEqual(documented);
    for (const metric of await registry.getMetricsAsJSON()) expect(metric.help).toMatch(/^[A-Z].{20,}/);
  });

  it('counts each decision by its result: the strategy, or the status the picker answered', async () => {
    const registry = new Registry();
    const metrics = new EppMetrics([registry]);
    const routed = { kind: 'routed', strategy: 'aggregated' } as Pick;
    metrics.picked(routed);
    metrics.picked({ kind: 'refused', status: 429, reason: 'rejected-saturated', body: {} });
    expect(await registry.getSingleMetricAsString('disagg_epp_picks_total')).toMatch(
      /result="aggregated"} 1\n.*result="refused_429"} 1/,
    );
  });
});
