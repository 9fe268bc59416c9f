// What the proxy's /metrics exports, and the problems of a PromQL expression against it: what
// the dashboard, the alert rules and the autoscalers' queries are checked by.

import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parse } from 'yaml';
import { EppMetrics } from '../../src/epp/epp-metrics.js';
import { WorkerPool } from '../../src/flow/worker-pool.js';
import { KvFollower } from '../../src/server/fleet/kv-following.js';
import { registerKvMetrics } from '../../src/server/observability/kv-metrics.js';
import { ProxyMetrics } from '../../src/server/observability/metrics.js';
import { registerReplicaMetrics } from '../../src/server/observability/replica-metrics.js';
import { recordingLogger } from './async.js';

/** Every metric /metrics exports, with its label names (a histogram as its three series). */
export async function exported(): Promise<Map<string, string[]>> {
  const pools = { prefill: new WorkerPool([{ url: 'http://p0' }]), decode: new WorkerPool([{ url: 'http://d0' }]) };
  const metrics = new ProxyMetrics(pools, { active: 0, queued: 0, limits: { maxConcurrent: 8, queueSize: 8 } });
  // The KV event metrics proxy-core registers beside them.
  const kv = new KvFollower({ logger: recordingLogger().logger });
  registerKvMetrics(metrics.registers, kv, (worker) => worker.url);
  // And disagg epp's, beside the proxy's own.
  new EppMetrics(metrics.registers);
  registerReplicaMetrics(metrics.registers, undefined);
  const names = new Map<string, string[]>();
  for (const metric of await metrics.registry.getMetricsAsJSON()) {
    const single = metrics.registry.getSingleMetric(metric.name) as unknown as { labelNames?: string[] };
    const labels = [...(single.labelNames ?? [])];
    if (String(metric.type) === 'histogram') {
      names.set(`${metric.name}_bucket`, [...labels, 'le']);
      names.set(`${metric.name}_sum`, labels);
      names.set(`${metric.name}_count`, labels);
    } else {
      // Some default metrics label their series without declaring names (nodejs_heap_space_*).
      names.set(metric.name, labels);
    }
  }
  return names;
}

/** Labels every scraped series carries besides its own. */
const TARGET_LABELS = ['instance', 'job', 'namespace', 'pod'];

/** Series Prometheus itself writes for every target it scrapes (their labels: the target's). */
const SCRAPE_SERIES = new Map<string, string[]>([['up', []]]);

/**
 * The problems of a PromQL expression against the exported metrics: a metric the proxy does not
 * export (nor Prometheus write for its scrape, as `up`), or a label (in a selector, a `by`, an `ignoring`) none of its metrics has.
 */
export function problems(expr: string, names: Map<string, string[]>): string[] {
  const found: string[] = [];
  const used = new Set<string>();
  for (const [, metric, selector] of expr.matchAll(/\b([a-z_][a-z0-9_]*)\s*\{([^}]*)\}/g)) {
    used.add(metric as string);
    const labels = names.get(metric as string) ?? SCRAPE_SERIES.get(metric as string);
    if (labels === undefined) {
      found.push(`${metric} is not exported`);
      continue;
    }
    for (const [, label] of (selector as string).matchAll(/([a-z_]+)\s*(?:=~|!=|!~|=)/g)) {
      if (!labels.includes(label as string) && !TARGET_LABELS.includes(label as string))
        found.push(`${metric} has no label ${label}`);
    }
  }
  // A metric named bare (without a selector) counts too.
  for (const [name] of expr.matchAll(/\b(?:disagg|process|nodejs)_[a-z0-9_]+\b/g)) {
    if (!names.has(name)) found.push(`${name} is not exported`);
    used.add(name);
  }
  const labelsOfUsed = new Set([...used].flatMap((name) => names.get(name) ?? []));
  for (const [, list] of expr.matchAll(/\b(?:by|ignoring|on)\s*\(([^)]*)\)/g)) {
    for (const label of (list as string).split(',').map((each) => each.trim())) {
      if (!labelsOfUsed.has(label) && !TARGET_LABELS.includes(label)) found.push(`no metric of "${expr}" has ${label}`);
    }
  }
  return found;
}

const root = fileURLToPath(new URL('../..', import.meta.url));

/** The queries of the KEDA triggers deploy/ ships, by trigger name, as written. */
export function kedaQueries(): Array<{ name: string; query: string }> {
  return ['prefill', 'decode'].flatMap((role) =>
    (
      parse(readFileSync(join(root, `deploy/kubernetes/autoscaling/keda/${role}-scaledobject.yaml`), 'utf8')).spec
        .triggers as Array<{ name: string; metadata: { query: string } }>
    ).map((trigger) => ({ name: trigger.name, query: trigger.metadata.query })),
  );
}
