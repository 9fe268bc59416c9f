// The autoscalers deploy/ ships for the prefill and decode workers: KEDA ScaledObjects and the
// plain HPA alternative, rendered as `kubectl apply -k` would, their queries checked against
// what the proxy exports (a live Prometheus runs them in scaling-live.test.ts).
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { parse, parseAllDocuments } from 'yaml';
import { exported, kedaQueries, problems } from '../support/exported-metrics.js';
import { run, tool } from '../support/tools.js';

const root = fileURLToPath(new URL('../..', import.meta.url));
const kubectl = tool('kubectl', 'kubernetes-client');
const render = (dir: string) =>
  parseAllDocuments(run('kubectl', ['kustomize', join(root, dir)])).map((document) => document.toJSON());

type Trigger = { type: string; name: string; metricType: string; metadata: { query: string; threshold: string } };

describe('the autoscalers of the workers', () => {
  it("the KEDA triggers' queries name metrics the proxy exports, with labels they have", async () => {
    const names = await exported();
    const queries = kedaQueries();
    expect(queries.map((each) => each.name)).toEqual(['prefill-saturation', 'prefill-backlog', 'decode-saturation']);
    expect(queries.flatMap((each) => problems(each.query, names))).toEqual([]);
  });

  it.skipIf(kubectl.skip)(
    `KEDA: a ScaledObject per stage, on its own saturation at the set point 1.0 (${kubectl.why})`,
    () => {
      const objects = render('deploy/kubernetes/autoscaling/keda');
      expect(objects.map((object) => `${object.kind}/${object.metadata.name}`).sort()).toEqual([
        'ScaledObject/decode-workers',
        'ScaledObject/prefill-workers',
      ]);
      for (const role of ['prefill', 'decode']) {
        const scaled = objects.find((object) => object.metadata.name === `${role}-workers`);
        expect(scaled.metadata.namespace).toBe('llm');
        expect(scaled.spec.scaleTargetRef.name).toBe(`${role}-workers`);
        const saturation = (scaled.spec.triggers as Trigger[]).find((each) => each.name === `${role}-saturation`);
        // Value: the HPA asks for ceil(replicas x saturation / threshold), saturation being a mean per worker.
        expect(saturation).toMatchObject({ type: 'prometheus', metricType: 'Value', metadata: { threshold: '1' } });
        expect(saturation?.metadata.query).toContain(`stage="${role}"`);
      }
    },
  );

  it.skipIf(kubectl.skip)(
    `the HPA alternative reads the same signal as an External metric, which the adapter's rule serves (${kubectl.why})`,
    async () => {
      const objects = render('deploy/kubernetes/autoscaling/hpa');
      expect(objects.map((object) => `${object.kind}/${object.metadata.name}`).sort()).toEqual([
        'HorizontalPodAutoscaler/decode-workers',
        'HorizontalPodAutoscaler/prefill-workers',
      ]);
      const rules = parse(
        readFileSync(join(root, 'deploy/kubernetes/autoscaling/hpa/prometheus-adapter-rules.yaml'), 'utf8'),
      ).rules.external;
      const served = rules.map((rule: { name: { as: string } }) => rule.name.as);
      const names = await exported();
      for (const rule of rules) expect(problems(rule.seriesQuery, names)).toEqual([]);
      for (const role of ['prefill', 'decode']) {
        const hpa = objects.find((object) => object.metadata.name === `${role}-workers`);
        const [metric] = hpa.spec.metrics;
        expect(metric.type).toBe('External');
        expect(served).toContain(metric.external.metric.name);
        expect(metric.external.metric.selector.matchLabels).toEqual({ pool: 'default', stage: role });
        expect(metric.external.target).toEqual({ type: 'Value', value: '1' });
        // The adapter keeps the labels the HPA selects on.
        for (const label of Object.keys(metric.external.metric.selector.matchLabels)) {
          expect(rules[0].metricsQuery).toContain(label);
        }
      }
    },
  );
});
