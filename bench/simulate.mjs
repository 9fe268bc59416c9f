#!/usr/bin/env node
// `npm run bench:simulate`: how fast a simulated fleet replays, on one core. The built
// `disagg simulate` replays 5,000 requests over 16 workers (8 prefill, 8 decode) under each
// routing, pinned to CPU 0 with taskset where it is installed, and this prints simulated
// seconds per wall second (the bar: 200x) and what each routing measured.
//
//   node bench/simulate.mjs [--trace FILE] [--requests N] [--routings a,b]
//
// Without --trace it replays the agent-sessions workload; Mooncake's published traces
// (kvcache-ai/Mooncake, FAST25-release/traces/conversation_trace.jsonl) are the reference.
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

const { values } = parseArgs({
  options: {
    trace: { type: 'string' },
    requests: { type: 'string', default: '5000' },
    routings: { type: 'string', default: 'disagg,random,round-robin,llm-d,precise' },
  },
});
const bin = fileURLToPath(new URL('../dist/cli.js', import.meta.url));
const source = values.trace === undefined ? ['--workload', 'agent-sessions'] : ['--trace', values.trace];
const pinned = spawnSync('taskset', ['-c', '0', 'true']).status === 0;

/** A routing's flags: a baseline's name, or `precise` (disagg with both pools on the engines' KV events). */
const flags = (routing) =>
  routing === 'precise'
    ? ['--prefill-policy', 'precise-prefix', '--decode-policy', 'precise-prefix']
    : ['--routing', routing];

const rows = [];
for (const routing of values.routings.split(',')) {
  const args = [
    bin,
    'simulate',
    ...source,
    '--requests',
    values.requests,
    '--prefill',
    '8',
    '--decode',
    '8',
    ...flags(routing),
    '--json',
  ];
  const run = pinned
    ? spawnSync('taskset', ['-c', '0', process.execPath, ...args], { encoding: 'utf8' })
    : spawnSync(process.execPath, args, { encoding: 'utf8' });
  if (run.status !== 0) {
    process.stderr.write(run.stderr);
    process.exit(1);
  }
  const s = JSON.parse(run.stdout);
  rows.push({
    routing,
    requests: s.completed,
    'simulated s': s.simulated_s.toFixed(0),
    'wall s': s.wall_s.toFixed(2),
    'x real time': (s.simulated_s / s.wall_s).toFixed(0),
    'TTFT p50/p99 ms': `${s.ttft_ms.p50.toFixed(0)} / ${s.ttft_ms.p99.toFixed(0)}`,
    'ITL p50/p99 ms': `${s.itl_ms.p50.toFixed(1)} / ${s.itl_ms.p99.toFixed(1)}`,
    'goodput rps': s.goodput_rps.toFixed(2),
    'hit rate': `${(s.prefix_hit_rate * 100).toFixed(1)}%`,
    'KV GB': s.kv_transfer_gb.toFixed(0),
  });
}
console.log(`disagg simulate, 8P + 8D, ${pinned ? 'pinned to CPU 0' : 'not pinned (no taskset)'}:`);
console.table(rows);
