// A simulation's summary as a terminal table: one column per routing (or fleet), one row per
// figure, so that routings compared on the same requests read side by side.

import type { SimulationResult } from './simulate-run.js';

type Row = readonly [label: string, value: (result: SimulationResult) => string];

const ms = (value: number) => (value >= 100 ? value.toFixed(0) : value.toFixed(1));
const share = (value: number) => `${(value * 100).toFixed(1)}%`;

/** Why requests were not served, where some were not: too long for the engine, refused by the router, preempted. */
function notServed(r: SimulationResult): string {
  const why = [
    ...(r.rejected > 0 ? [`${r.rejected} too long`] : []),
    ...Object.entries(r.shed).map(([reason, count]) => `${count} shed: ${reason}`),
    ...(r.preempted > 0 ? [`${r.preempted} preempted`] : []),
  ];
  return why.length === 0 ? '' : ` (${why.join(', ')})`;
}

const ROWS: readonly Row[] = [
  ['fleet', (r) => `${r.prefill_workers}P + ${r.decode_workers}D (${r.gpus} GPUs)`],
  ['requests', (r) => `${r.completed}/${r.requests}${notServed(r)}`],
  ['TTFT p50 / p90 / p99 ms', (r) => `${ms(r.ttft_ms.p50)} / ${ms(r.ttft_ms.p90)} / ${ms(r.ttft_ms.p99)}`],
  ['ITL p50 / p90 / p99 ms', (r) => `${ms(r.itl_ms.p50)} / ${ms(r.itl_ms.p90)} / ${ms(r.itl_ms.p99)}`],
  ['goodput req/s', (r) => r.goodput_rps.toFixed(2)],
  ['throughput req/s', (r) => r.throughput_rps.toFixed(2)],
  ['output tokens/s', (r) => r.output_tokens_per_s.toFixed(0)],
  ['prefix hit rate', (r) => share(r.prefix_hit_rate)],
  ['KV transferred GB', (r) => r.kv_transfer_gb.toFixed(1)],
  ['preemptions', (r) => String(r.preemptions)],
  [
    'decisions',
    (r) =>
      Object.entries(r.decisions)
        .map(([reason, count]) => `${reason} ${count}`)
        .join(', '),
  ],
  ['simulated s', (r) => r.simulated_s.toFixed(1)],
];

/**
 * The results as a table, a column each, with the service levels and the run's wall time
 * under it.
 *
 * @example
 * console.log(resultTable([result])); // routing | disagg ...
 */
export function resultTable(results: readonly (SimulationResult & { wall_s: number })[]): string {
  const header = ['routing', ...results.map((r) => r.routing)];
  // A row per tenant, where the requests name tenants: each one's own service.
  const tenants = [...new Set(results.flatMap((r) => Object.keys(r.tenants ?? {})))];
  const tenantRows: Row[] = tenants.map((name) => [
    `${name}: attained, TTFT p99`,
    (r) => {
      const tenant = r.tenants?.[name];
      if (tenant === undefined) return '';
      const lost = tenant.shed + tenant.preempted;
      return `${share(tenant.slo_attainment)}, ${ms(tenant.ttft_ms.p99)} ms${lost > 0 ? `, ${tenant.shed} shed, ${tenant.preempted} preempted` : ''}`;
    },
  ]);
  const body = [...ROWS, ...tenantRows].map(([label, value]) => [label, ...results.map(value)]);
  const rows = [header, ...body];
  const widths = header.map((_, column) => Math.max(...rows.map((row) => (row[column] as string).length)));
  const line = (row: readonly string[]) =>
    row
      .map((cell, column) => cell.padEnd(widths[column] as number))
      .join('  ')
      .trimEnd();
  const first = results[0];
  const footer =
    first === undefined
      ? ''
      : `\nService levels: TTFT <= ${first.slo.ttftMs} ms and mean ITL <= ${first.slo.itlMs} ms${tenants.length > 0 ? " (a request's own where it names them)" : ''}; profile ${first.profile}; ${results[results.length - 1]?.wall_s.toFixed(1)} s of wall time in all.`;
  return `${rows.map(line).join('\n')}${footer}`;
}
