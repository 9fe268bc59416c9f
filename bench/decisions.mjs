#!/usr/bin/env node
// `npm run bench:decisions`: the router's decisions measured under load. The built `disagg
// simulate` replays each workload at each rate scale under each routing, and this writes what
// users would have felt: a table of goodput and p99 TTFT per load, and SVG plots of both against
// load, per workload (docs/decisions/).
//
//   node bench/decisions.mjs [--trace FILE] [--requests N] [--scales 1,2,4] [--out DIR]
//
// --trace adds a Mooncake-format trace (kvcache-ai/Mooncake FAST25-release/traces/
// conversation_trace.jsonl is the reference) to the built-in workloads.
import { spawnSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { basename, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { linePlot } from './svg-plot.mjs';

const { values } = parseArgs({
  options: {
    trace: { type: 'string' },
    requests: { type: 'string', default: '2000' },
    // Each workload's own by default: from light load to past where the fleet saturates.
    scales: { type: 'string' },
    out: { type: 'string', default: fileURLToPath(new URL('../docs/decisions', import.meta.url)) },
    prefill: { type: 'string', default: '4' },
    decode: { type: 'string', default: '4' },
    'slo-ttft-ms': { type: 'string', default: '2000' },
    'slo-itl-ms': { type: 'string', default: '100' },
    // The flood alone (its table and results-flood.json), without the sweep.
    'flood-only': { type: 'boolean', default: false },
  },
});
const bin = fileURLToPath(new URL('../dist/cli.js', import.meta.url));

/**
 * The routings compared: a baseline's name, or disagg's with flags. `disagg` is `disagg
 * serve`'s defaults as they are (the SLO-aware scored policy on both pools, predicted-wait);
 * `least-in-flight, no decider` the defaults of earlier releases, the rest steps between.
 */
const POLICIES = [
  { name: 'random', flags: ['--routing', 'random'] },
  { name: 'round-robin', flags: ['--routing', 'round-robin'] },
  { name: 'llm-d', flags: ['--routing', 'llm-d'] },
  { name: 'least-in-flight, no decider', flags: ['--selection', 'least-in-flight', '--deciders', ''] },
  { name: 'least-in-flight + prefill-busy', flags: ['--selection', 'least-in-flight', '--deciders', 'prefill-busy'] },
  {
    name: 'cache-aware + prefill-busy',
    flags: ['--prefill-policy', 'cache-aware', '--decode-policy', 'cache-aware', '--deciders', 'prefill-busy'],
  },
  // The scored policy with the decider of the release before: what predicted-wait adds.
  { name: 'scored + prefill-busy', flags: ['--deciders', 'prefill-busy'] },
  { name: 'disagg', flags: [] },
];
const workloads = [
  ...(values.trace === undefined
    ? []
    : [
        {
          name: basename(values.trace, '.jsonl'),
          flags: ['--trace', values.trace],
          scales: [0.5, 1, 1.5, 2, 2.5, 3, 4],
        },
      ]),
  { name: 'agent-sessions', flags: ['--workload', 'agent-sessions'], scales: [2, 4, 6, 8, 10, 12] },
  { name: 'bursty-chat', flags: ['--workload', 'bursty-chat'], scales: [2, 4, 6, 8, 10, 12, 16] },
  // Two tenants, each request held to its own service levels (interactive 1 s / 50 ms, batch 10 s / 200 ms).
  { name: 'mixed', flags: ['--workload', 'mixed'], scales: [1, 2, 3, 4, 5, 6, 8] },
];
const scalesOf = (workload) => (values.scales === undefined ? workload.scales : values.scales.split(',').map(Number));

/** The requests and the fleet every replay here has. */
const fleetArgs = ['--requests', values.requests, '--prefill', values.prefill, '--decode', values.decode];

/** One `disagg simulate --json` run; exits on a failed one. */
function simulate(args) {
  const run = spawnSync(process.execPath, [bin, 'simulate', ...args, '--json'], {
    encoding: 'utf8',
    maxBuffer: 16 * 1024 * 1024,
  });
  if (run.status !== 0) {
    process.stderr.write(run.stderr);
    process.exit(1);
  }
  return JSON.parse(run.stdout);
}

// A tenant floods the fleet: the mixed workload's batch tenant (priority 0) arriving 15 times as
// fast (three times the x5 at which the fleet, serving everything, saturates) beside the
// interactive tenant (priority 1) at its own rate, against the same without the flood; under
// the proxy's admission as it is by default (1,024 slots), with 24 slots (3 per worker) and
// priorities, and with 24 slots and preemption. Seeds 1 to 3.
const FLOOD_SETUPS = [
  { name: 'default admission (1,024 slots)', flags: [] },
  { name: '24 slots, by priority', flags: ['--max-concurrent-requests', '24'] },
  { name: '24 slots, by priority, --preempt', flags: ['--max-concurrent-requests', '24', '--preempt'] },
];
const flood = [];
for (const setup of FLOOD_SETUPS) {
  for (const seed of [1, 2, 3]) {
    for (const batch of [1, 15]) {
      const s = simulate([
        '--workload',
        'mixed',
        ...fleetArgs,
        '--tenant-rate-scale',
        `batch=${batch}`,
        '--seed',
        String(seed),
        ...setup.flags,
      ]);
      flood.push({
        setup: setup.name,
        seed,
        batch_rate_scale: batch,
        tenants: s.tenants,
        shed: s.shed,
        preempted: s.preempted,
      });
      process.stderr.write(`\rflood ${setup.name} seed ${seed} batch x${batch}`.padEnd(70));
    }
  }
}
process.stderr.write('\n');
mkdirSync(values.out, { recursive: true });
writeFileSync(join(values.out, 'results-flood.json'), `${JSON.stringify({ settings: values, flood }, null, 2)}\n`);
console.log(
  "\nmixed, the batch tenant flooding (x15): the interactive tenant's SLO attainment, unflooded -> flooded (points lost), per seed; batch attained, shed, preempted",
);
console.log('| admission | seed 1 | seed 2 | seed 3 | batch (seed 1) |');
console.log('|---|---:|---:|---:|---|');
for (const setup of FLOOD_SETUPS) {
  const at = (seed, batch) =>
    flood.find((r) => r.setup === setup.name && r.seed === seed && r.batch_rate_scale === batch);
  const cells = [1, 2, 3].map((seed) => {
    const calm = at(seed, 1).tenants.interactive.slo_attainment * 100;
    const flooded = at(seed, 15).tenants.interactive.slo_attainment * 100;
    return `${calm.toFixed(1)} -> ${flooded.toFixed(1)} % (${(calm - flooded).toFixed(1)})`;
  });
  const batch = at(1, 15).tenants.batch;
  console.log(
    `| ${setup.name} | ${cells.join(' | ')} | ${(batch.slo_attainment * 100).toFixed(1)} %, ${batch.shed} shed, ${batch.preempted} preempted |`,
  );
}
if (values['flood-only']) process.exit(0);

const results = [];
for (const workload of workloads) {
  for (const policy of POLICIES) {
    for (const scale of scalesOf(workload)) {
      const s = simulate([
        ...workload.flags,
        ...fleetArgs,
        '--slo-ttft-ms',
        values['slo-ttft-ms'],
        '--slo-itl-ms',
        values['slo-itl-ms'],
        '--rate-scale',
        String(scale),
        ...policy.flags,
      ]);
      results.push({
        workload: workload.name,
        policy: policy.name,
        scale,
        goodput_rps: s.goodput_rps,
        slo_attainment: s.slo_attainment,
        ttft_p99_ms: s.ttft_ms.p99,
        itl_p99_ms: s.itl_ms.p99,
        prefix_hit_rate: s.prefix_hit_rate,
        decisions: s.decisions,
      });
      process.stderr.write(`\r${workload.name} ${policy.name} x${scale}`.padEnd(60));
    }
  }
}
process.stderr.write('\n');

mkdirSync(values.out, { recursive: true });
writeFileSync(join(values.out, 'results.json'), `${JSON.stringify({ settings: values, results }, null, 2)}\n`);
for (const workload of workloads) {
  const of = (policy) => results.filter((r) => r.workload === workload.name && r.policy === policy.name);
  const series = (metric) =>
    POLICIES.map((policy) => ({ name: policy.name, points: of(policy).map((r) => [r.scale, r[metric]]) }));
  const slug = workload.name.replace(/[^a-z0-9]+/gi, '-');
  writeFileSync(
    join(values.out, `${slug}-goodput.svg`),
    linePlot({
      title: `${workload.name}: goodput`,
      x: 'rate scale',
      y: 'req/s within both SLOs',
      series: series('goodput_rps'),
    }),
  );
  writeFileSync(
    join(values.out, `${slug}-ttft-p99.svg`),
    linePlot({
      title: `${workload.name}: TTFT p99`,
      x: 'rate scale',
      y: 'ms',
      series: series('ttft_p99_ms'),
      logY: true,
    }),
  );
  console.log(
    `\n${workload.name} (${values.prefill}P + ${values.decode}D, TTFT <= ${values['slo-ttft-ms']} ms, mean ITL <= ${values['slo-itl-ms']} ms): goodput req/s | TTFT p99 ms`,
  );
  console.log(
    `| routing | ${scalesOf(workload)
      .map((scale) => `x${scale}`)
      .join(' | ')} |`,
  );
  console.log(
    `|---|${scalesOf(workload)
      .map(() => '---:')
      .join('|')}|`,
  );
  for (const policy of POLICIES) {
    const cells = of(policy).map(
      (r) => `${r.goodput_rps.toFixed(2)} / ${Math.round(r.ttft_p99_ms).toLocaleString('en')}`,
    );
    console.log(`| ${policy.name} | ${cells.join(' | ')} |`);
  }
}

// The issue's bar, read where llm-d's goodput peaks: disagg's goodput and p99 TTFT over llm-d's,
// and its goodput over random's, at that load.
console.log('\nAt the load where llm-d peaks: disagg over llm-d (goodput, p99 TTFT), over random (goodput)');
for (const workload of workloads) {
  const at = (policy, scale) =>
    results.find((r) => r.workload === workload.name && r.policy === policy && r.scale === scale);
  const llmd = results.filter((r) => r.workload === workload.name && r.policy === 'llm-d');
  const peak = llmd.reduce((best, r) => (r.goodput_rps > best.goodput_rps ? r : best));
  for (const policy of POLICIES.slice(3)) {
    const ours = at(policy.name, peak.scale);
    const random = at('random', peak.scale);
    console.log(
      `| ${workload.name} x${peak.scale} | ${policy.name} | ${(ours.goodput_rps / peak.goodput_rps).toFixed(2)}x | ${(ours.ttft_p99_ms / peak.ttft_p99_ms).toFixed(2)}x | ${(ours.goodput_rps / random.goodput_rps).toFixed(2)}x |`,
    );
  }
}
