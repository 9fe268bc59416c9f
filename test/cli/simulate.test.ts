import { spawnSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const root = fileURLToPath(new URL('../..', import.meta.url));
const bin = `${root}/dist/cli.js`;

/** The built command, as an operator runs it. */
function disagg(...args: string[]) {
  const run = spawnSync(process.execPath, [bin, ...args], {
    encoding: 'utf8',
    env: { ...process.env, DISAGG_CONFIG: '' },
  });
  return { status: run.status, stdout: run.stdout, stderr: run.stderr };
}

function json(...args: string[]) {
  const run = disagg(...args, '--json');
  expect(run.stderr).toBe('');
  expect(run.status).toBe(0);
  return JSON.parse(run.stdout);
}

const SMALL = ['--workload', 'bursty-chat', '--requests', '200'];

describe('disagg simulate', () => {
  it('prints the summary the issue names: requests, completed, TTFT and ITL percentiles, goodput, hit rate, KV moved, decisions, time', () => {
    const summary = json('simulate', ...SMALL);
    expect(summary).toMatchObject({
      routing: 'disagg',
      requests: 200,
      completed: 200,
      decisions: { disaggregated: 200 },
      prefill_workers: 2,
      decode_workers: 2,
    });
    for (const key of ['ttft_ms', 'itl_ms']) {
      expect(Object.keys(summary[key])).toEqual(expect.arrayContaining(['p50', 'p90', 'p99']));
      expect(summary[key].p50).toBeGreaterThan(0);
      expect(summary[key].p99).toBeGreaterThanOrEqual(summary[key].p50);
    }
    for (const key of ['goodput_rps', 'prefix_hit_rate', 'kv_transfer_gb', 'simulated_s', 'wall_s']) {
      expect(typeof summary[key]).toBe('number');
    }
    expect(summary.prefix_hit_rate).toBeGreaterThanOrEqual(0);
    expect(summary.prefix_hit_rate).toBeLessThanOrEqual(1);
    expect(summary.kv_transfer_gb).toBeGreaterThan(0);
  });

  it('is the same replay for a seed, and another for another seed', () => {
    const strip = ({ wall_s: _wall, ...rest }: Record<string, unknown>) => rest;
    const first = strip(json('simulate', ...SMALL, '--seed', '7', '--routing', 'random'));
    expect(strip(json('simulate', ...SMALL, '--seed', '7', '--routing', 'random'))).toEqual(first);
    expect(strip(json('simulate', ...SMALL, '--seed', '8', '--routing', 'random'))).not.toEqual(first);
  });

  it('compares routings side by side on the same requests, in the order named', () => {
    const runs = json('simulate', ...SMALL, '--routing', 'random,round-robin,llm-d,disagg');
    expect(runs.map((run: { routing: string }) => run.routing)).toEqual(['random', 'round-robin', 'llm-d', 'disagg']);
    expect(new Set(runs.map((run: { requests: number }) => run.requests))).toEqual(new Set([200]));
    const table = disagg('simulate', ...SMALL, '--routing', 'random,disagg');
    expect(table.status).toBe(0);
    expect(table.stdout).toMatch(/^routing\s+random\s+disagg$/m);
    expect(table.stdout).toMatch(/^TTFT p50 \/ p90 \/ p99 ms\s+\S/m);
  });

  it("routes with disagg serve's own settings: a decider's reason is the decision", () => {
    const summary = json('simulate', ...SMALL, '--aggregate-below-chars', '100000000');
    expect(summary.decisions).toEqual({ 'short-prompt': 200 });
    expect(summary.kv_transfer_gb).toBe(0);
  });

  it('serves every request whole on decode workers alone with --prefill 0', () => {
    const summary = json('simulate', ...SMALL, '--prefill', '0', '--decode', '3');
    expect(summary.decisions).toEqual({ 'no-prefill-worker': 200 });
    expect(summary.gpus).toBe(3);
  });

  it('replays a Mooncake-format trace file, its first --requests', () => {
    const path = join(tmpdir(), `disagg-simulate-${process.pid}.jsonl`);
    const lines = Array.from({ length: 50 }, (_, i) =>
      JSON.stringify({ timestamp: i * 100, input_length: 1500, output_length: 20, hash_ids: [1, 2, 100 + i] }),
    );
    writeFileSync(path, `${lines.join('\n')}\n`);
    const summary = json('simulate', '--trace', path, '--requests', '40', '--rate-scale', '2');
    expect(summary.requests).toBe(40);
    expect(summary.completed).toBe(40);
    // Two of each prompt's three blocks are every other prompt's: cached after the first, on the worker that has them.
    expect(summary.prefix_hit_rate).toBeGreaterThan(0);
  });

  it('lists the built-in profiles, each with its model, GPU and source', () => {
    const run = disagg('simulate', '--list-profiles');
    expect(run.status).toBe(0);
    expect(run.stdout).toMatch(/llama-3\.1-8b-fp8-h200-tp1-vllm/);
    expect(run.stdout.trim().split('\n').length).toBeGreaterThanOrEqual(4);
  });

  it.each([
    [['--decode-policy', 'nope'], 2, /decode-policy/],
    [['--profile', 'nope'], 2, /llama-3\.1-8b-fp8-h200-tp1-vllm/],
    [['--prefill-dns', 'x.svc'], 2, /makes its own workers: drop --prefill-dns/],
    [['--routing', 'fastest'], 2, /choose from disagg, random, round-robin, llm-d/],
    [['--decode', '0'], 2, /--decode takes 1 worker or more/],
    [['--tenant-rate-scale', 'batch=2'], 2, /not a tenant of the bursty-chat workload \(it names none\)/],
    [['--tenant-rate-scale', 'batch'], 2, /--tenant-rate-scale takes TENANT=X/],
  ])("an operator's mistake (%j) is one line saying what to change", (args, status, message) => {
    const run = disagg('simulate', ...SMALL, ...(args as string[]));
    expect(run.status).toBe(status);
    expect(run.stdout).toBe('');
    expect(run.stderr).toMatch(message as RegExp);
    expect(run.stderr).not.toMatch(/\n\s+at /);
    expect(run.stderr.trim().split('\n').length).toBeLessThanOrEqual(2);
  });

  it('admits as the proxy does: past --max-concurrent-requests a request waits, the higher priority first', () => {
    // Batch floods a small fleet; the router's slots hold it back and let the interactive tenant by.
    const flood = ['--workload', 'mixed', '--requests', '600', '--tenant-rate-scale', 'batch=15'];
    const open = json('simulate', ...flood);
    const held = json('simulate', ...flood, '--max-concurrent-requests', '16');
    expect(held.tenants.interactive.slo_attainment).toBeGreaterThan(open.tenants.interactive.slo_attainment + 0.2);
    // Batch waits behind it, past the queue's 30 s for some: refused as the proxy would, 429.
    expect(open.shed).toEqual({});
    expect(held.shed.queue_timeout).toBeGreaterThan(0);
    expect(held.tenants.batch.shed).toBe(held.shed.queue_timeout);
    expect(held.tenants.interactive.shed).toBe(0);
  });

  it('a trace that is not there is one line and exit 1', () => {
    const run = disagg('simulate', '--trace', '/nonexistent/trace.jsonl');
    expect(run.status).toBe(1);
    expect(run.stderr).toMatch(/^disagg simulate: .*no such file/i);
  });

  it('asks for requests when given none', () => {
    const run = disagg('simulate');
    expect(run.status).toBe(2);
    expect(run.stderr).toMatch(/--trace FILE\) or a workload \(--workload NAME\)/);
  });
});

describe('disagg plan', () => {
  it('returns a fleet that meets its service levels in simulation, and one worker fewer of either kind does not', () => {
    // Four times the workload's rate: a fleet of more than one worker of each kind is needed
    // (every prompt on prefill: prefill-busy would compute some on decode).
    const load = [...SMALL, '--rate-scale', '4', '--slo-ttft-ms', '200', '--slo-itl-ms', '8', '--deciders', ''];
    const answer = json('plan', ...load, '--gpus', '8', '--attainment', '0.9');
    expect(answer.plan.passes).toBe(true);
    expect(answer.plan.slo_attainment).toBeGreaterThanOrEqual(0.9);
    expect(answer.plan.gpus).toBeLessThanOrEqual(8);
    expect(answer.plan.prefill).toBeGreaterThan(1);
    expect(answer.plan.decode).toBeGreaterThan(1);
    expect(answer.one_fewer_prefill).toMatchObject({
      prefill: answer.plan.prefill - 1,
      decode: answer.plan.decode,
      passes: false,
    });
    expect(answer.one_fewer_decode).toMatchObject({
      prefill: answer.plan.prefill,
      decode: answer.plan.decode - 1,
      passes: false,
    });
    // Checked by simulating it: the plan's fleet, simulated on its own, attains the same.
    const again = json(
      'simulate',
      ...load,
      '--prefill',
      String(answer.plan.prefill),
      '--decode',
      String(answer.plan.decode),
    );
    expect(again.slo_attainment).toBe(answer.plan.slo_attainment);
  });

  it('says so, exit 1, when no fleet within the budget meets them', () => {
    const run = disagg('plan', ...SMALL, '--gpus', '2', '--slo-ttft-ms', '1', '--slo-itl-ms', '1');
    expect(run.status).toBe(1);
    expect(run.stdout).toMatch(/No fleet within 2 GPUs meets the service levels/);
  });

  it('needs a GPU budget', () => {
    const run = disagg('plan', ...SMALL);
    expect(run.status).toBe(2);
    expect(run.stderr).toMatch(/--gpus N/);
  });
});
