// npm run bench: every case in its own process (node --expose-gc bench/worker.mjs ...), several
// passes interleaved so that drift on the machine hits every case alike; medians of medians;
// everything as a ratio to the bare baseline (and to the pass-through generator) of this run.
import { execFileSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { availableParallelism, cpus } from 'node:os';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { CASES, CONCURRENT_MODES } from './cases.mjs';

const { values: args } = parseArgs({
  options: {
    items: { type: 'string', default: '1000000' },
    rounds: { type: 'string', default: '5' },
    passes: { type: 'string', default: '5' },
    streams: { type: 'string', default: '10000' },
    tokens: { type: 'string', default: '100' },
    out: { type: 'string', default: fileURLToPath(new URL('results.json', import.meta.url)) },
    'no-write': { type: 'boolean', default: false },
  },
});
const worker = fileURLToPath(new URL('worker.mjs', import.meta.url));
const passes = Number(args.passes);

function runWorker(...workerArgs) {
  const out = execFileSync(process.execPath, ['--expose-gc', worker, ...workerArgs], {
    encoding: 'utf8',
    maxBuffer: 1 << 20,
  });
  return JSON.parse(out.trim().split('\n').pop());
}

const median = (values) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)];

const perCase = Object.fromEntries(Object.keys(CASES).map((name) => [name, []]));
const concurrentRuns = Object.fromEntries(Object.keys(CONCURRENT_MODES).map((mode) => [mode, []]));
for (let pass = 0; pass < passes; pass++) {
  for (const name of Object.keys(CASES)) {
    perCase[name].push(runWorker('stream', name, `--items=${args.items}`, `--rounds=${args.rounds}`));
  }
  for (const mode of Object.keys(CONCURRENT_MODES)) {
    concurrentRuns[mode].push(
      runWorker('concurrent', mode, `--streams=${args.streams}`, `--tokens=${args.tokens}`, '--rounds=2'),
    );
  }
  process.stderr.write(`pass ${pass + 1}/${passes} done\n`);
}

const rows = Object.entries(perCase).map(([name, runs]) => ({
  name,
  label: CASES[name].label,
  nsPerItem: median(runs.map((r) => r.nsPerItem)),
  allocatedPerItem: median(runs.map((r) => r.allocatedPerItem)),
  retainedPerItem: median(runs.map((r) => r.retainedPerItem)),
}));
const byName = Object.fromEntries(rows.map((row) => [row.name, row]));
const perPassRatio = (name, reference, field) =>
  median(perCase[name].map((run, pass) => run[field] / perCase[reference][pass][field]));
const pass = byName.passThrough;
for (const row of rows) {
  // Ratios are taken within each pass (processes run back to back, on the machine as it was
  // then) and their median reported: the machine's speed drifts between passes by more than
  // the differences measured here.
  row.timeVsBaseline = perPassRatio(row.name, 'baseline', 'nsPerItem');
  row.timeVsPassThrough = perPassRatio(row.name, 'passThrough', 'nsPerItem');
  row.allocationVsPassThrough = row.allocatedPerItem / pass.allocatedPerItem;
}
const concurrentRows = Object.entries(concurrentRuns).map(([mode, runs]) => ({
  mode,
  label: CONCURRENT_MODES[mode],
  itemsPerSecond: median(runs.map((r) => r.itemsPerSecond)),
  peakHeapPerStream: median(runs.map((r) => r.peakHeapPerStream)),
}));
for (const row of concurrentRows) {
  row.throughputRatio = median(
    concurrentRuns[row.mode].map((run, pass) => run.itemsPerSecond / concurrentRuns.plain[pass].itemsPerSecond),
  );
}
const concurrent = {
  streams: Number(args.streams),
  tokens: Number(args.tokens),
  rows: concurrentRows,
  throughputRatio: concurrentRows.find((row) => row.mode === 'wrapped').throughputRatio,
};

const targets = [
  ['forwardDecode pending, time vs pass-through', byName.forwardPending.timeVsPassThrough, '<=', 1.25],
  ['forwardDecode succeeded, time vs pass-through', byName.forwardSucceeded.timeVsPassThrough, '<=', 1.05],
  ['forwardDecode pending, retained B/item', byName.forwardPending.retainedPerItem, '<', 1],
  ['forwardDecode pending, allocation vs pass-through', byName.forwardPending.allocationVsPassThrough, '<=', 1.3],
  [`${concurrent.streams} concurrent streams, throughput vs unwrapped`, concurrent.throughputRatio, '>=', 0.8],
].map(([what, value, op, limit]) => ({
  what,
  value,
  target: `${op} ${limit}`,
  met: op === '<=' ? value <= limit : op === '<' ? value < limit : value >= limit,
}));

const machine = {
  node: process.version,
  cpus: availableParallelism(),
  cpuModel: cpus()[0]?.model ?? 'unknown',
  date: new Date().toISOString().slice(0, 10),
};
const fmt = (n, digits = 2) => n.toFixed(digits);
const lines = [];
lines.push(
  `Node ${machine.node}, ${machine.cpus} CPUs (${machine.cpuModel}), ${args.items} items per stream case, ${passes} passes x ${args.rounds} rounds, medians`,
);
lines.push('');
lines.push('| case | ns/item | x baseline | x pass-through | alloc B/item | alloc x pass-through | retained B/item |');
lines.push('|---|---:|---:|---:|---:|---:|---:|');
for (const row of rows) {
  lines.push(
    `| ${row.label} | ${fmt(row.nsPerItem, 0)} | ${fmt(row.timeVsBaseline)} | ${fmt(row.timeVsPassThrough)} | ${fmt(row.allocatedPerItem, 0)} | ${fmt(row.allocationVsPassThrough)} | ${fmt(row.retainedPerItem, 3)} |`,
  );
}
lines.push('');
lines.push(
  `| ${concurrent.streams} concurrent streams x ${concurrent.tokens} tokens, prefill settling mid-stream | items/s | x unwrapped | peak live heap B/stream |`,
);
lines.push('|---|---:|---:|---:|');
for (const row of concurrentRows) {
  lines.push(
    `| ${row.label} | ${fmt(row.itemsPerSecond, 0)} | ${fmt(row.throughputRatio)} | ${fmt(row.peakHeapPerStream, 0)} |`,
  );
}
lines.push('');
lines.push('| target | value | wanted | met |');
lines.push('|---|---:|---|---|');
for (const t of targets) lines.push(`| ${t.what} | ${fmt(t.value, 3)} | ${t.target} | ${t.met ? 'yes' : 'no'} |`);
console.log(lines.join('\n'));

// Exact integers in big JSON bodies, in a process of its own (it would warm the JIT for no case).
const jsonScale = Math.min(1, Number(args.items) / 1_000_000);
console.log('');
console.log(
  execFileSync(
    process.execPath,
    [fileURLToPath(new URL('json.mjs', import.meta.url)), `--scale=${jsonScale}`, `--passes=${Math.min(passes, 5)}`],
    {
      encoding: 'utf8',
    },
  ).trimEnd(),
);

if (!args['no-write']) {
  writeFileSync(args.out, `${JSON.stringify({ machine, args, rows, concurrent, targets }, null, 2)}\n`);
  console.log(`\nwritten to ${args.out}`);
}
