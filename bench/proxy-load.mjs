// The client side of bench/proxy.mjs: streamed requests against one path, with what each
// stream saw (time to the first token, the gaps between tokens) and what the proxy process
// spent on them (its CPU time, read from /proc before and after the run; its resident set,
// sampled during the run; a disagg proxy's event loop delay, from its /metrics).
import { spawn, spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { Agent, request } from 'undici';

// NaN for no values (every request of a run failed): the table says so instead of crashing.
export const median = (values) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)] ?? Number.NaN;
export const p99 = (values) => [...values].sort((a, b) => a - b)[Math.floor(values.length * 0.99)] ?? Number.NaN;

/**
 * The node flags of the image's entry point (`ENTRYPOINT ["node", ...flags, "dist/cli.js"]`)
 * and its `NODE_OPTIONS` (`ENV NODE_OPTIONS=...`), read from deploy/Dockerfile: a proxy is
 * measured as it ships.
 */
export function imageNode() {
  const dockerfile = readFileSync(new URL('../deploy/Dockerfile', import.meta.url), 'utf8');
  return {
    flags: JSON.parse(/^ENTRYPOINT (\[.*\])$/m.exec(dockerfile)?.[1] ?? '[]').slice(1, -1),
    options: /^ENV NODE_OPTIONS=(.+)$/m.exec(dockerfile)?.[1] ?? '',
  };
}

/**
 * Where each process of a run goes: the proxy measured on a CPU of its own (the first), the
 * workers, the peers' interpreters and the load generator on the others, so that a proxy's
 * figures are its own and not the sum of whatever shared its core. Undefined (nothing pinned)
 * when `wanted` is false, the machine has one CPU, or `taskset` (util-linux) is missing.
 */
export function cpuPlan(wanted) {
  const cpus = availableParallelism();
  if (!wanted || cpus < 2 || spawnSync('taskset', ['-c', '0', 'true']).status !== 0) return undefined;
  return { cpus, proxy: '0', others: cpus === 2 ? '1' : `1-${cpus - 1}` };
}

/** Moves this process (every thread) onto the plan's other CPUs; its children inherit them. */
export function pinSelf(plan) {
  if (plan === undefined) return;
  const moved = spawnSync('taskset', ['-a', '-p', '-c', plan.others, String(process.pid)]);
  if (moved.status !== 0) throw new Error(`taskset could not move the benchmark: ${moved.stderr}`);
}

/** The command and arguments that run `command` on the plan's proxy CPU (as it is, unpinned). */
export function onProxyCpu(plan, command, args) {
  return plan === undefined ? [command, args] : ['taskset', ['-c', plan.proxy, command, ...args]];
}

/** CPU time (user + system) a process has used, in ms; undefined where /proc is missing. */
export function cpuMs(pid) {
  try {
    // Fields 14 and 15 of /proc/<pid>/stat, after the command name in parentheses.
    const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
    return ((Number(fields[11]) + Number(fields[12])) * 1000) / 100; // USER_HZ is 100 on Linux
  } catch {
    return undefined;
  }
}

/** A process's resident set now, in MB (VmRSS); undefined where /proc is missing. */
export function rssMb(pid) {
  try {
    const kb = readFileSync(`/proc/${pid}/status`, 'utf8').match(/VmRSS:\s+(\d+)/);
    return kb === null ? undefined : Number(kb[1]) / 1024;
  } catch {
    return undefined;
  }
}

/** prom-client's event loop probe: a timer every 10 ms, whose every interval it records. */
const PROBE_MS = 10;

/**
 * What a disagg proxy's /metrics says since the last time it was read (prom-client resets its
 * event loop histogram on every read): the loop's delay p99 in ms (how much later than due its
 * 10 ms probe ran; prom-client's figure is the whole interval, the 10 ms included), and the
 * garbage collector's pauses so far by kind (prom-client's `nodejs_gc_duration_seconds`, from
 * Node's own GC observer: young-generation scavenges are `minor`). NaN and nothing for a proxy
 * without one.
 */
export async function proxyMetrics(metricsUrl) {
  if (metricsUrl === undefined) return { loopP99: Number.NaN, gc: {} };
  const answer = await request(metricsUrl);
  const text = await answer.body.text();
  const line = text.split('\n').find((l) => l.startsWith('nodejs_eventloop_lag_p99_seconds '));
  const gc = {};
  for (const match of text.matchAll(/^nodejs_gc_duration_seconds_(sum|count)\{kind="(\w+)"\} (\S+)$/gm)) {
    gc[match[2]] ??= { sum: 0, count: 0 };
    gc[match[2]][match[1]] = Number(match[3]);
  }
  return {
    loopP99: line === undefined ? Number.NaN : Math.max(0, Number(line.split(' ')[1]) * 1000 - PROBE_MS),
    gc,
  };
}

/** The pauses of one GC kind between two readings: their count and total ms. */
function gcBetween(before, after, kind) {
  const a = before.gc[kind] ?? { sum: 0, count: 0 };
  const b = after.gc[kind];
  return b === undefined
    ? { count: Number.NaN, ms: Number.NaN }
    : { count: b.count - a.count, ms: (b.sum - a.sum) * 1000 };
}

/** Counts the SSE events (`data:` lines) in a chunk of bytes. */
function events(chunk) {
  let count = 0;
  for (let at = chunk.indexOf('data:'); at !== -1; at = chunk.indexOf('data:', at + 5)) count++;
  return count;
}

/**
 * Sends `requests` streamed requests, `concurrency` at a time (or, with `rate`, one every
 * 1/rate s, however many are then in flight; with `maxInFlight` too, a request due while that
 * many are in flight waits for one of them to end: a closed loop held to a rate, the same
 * load on every path whatever its own pace), and measures per stream the time
 * to the first data event and every gap between two events as the client reads them: events
 * that arrive in one read are a burst, gaps of 0 after a long one, as a client sees them.
 */
export async function load(url, body, { requests, concurrency, tokens, pid, rate, maxInFlight, metricsUrl }) {
  // No proxy here takes a minute to answer (the fake workers give a handoff up after 30 s):
  // a request past that is reported as failed, not waited for five minutes.
  const dispatcher = new Agent({ connections: concurrency * 2, headersTimeout: 60_000, bodyTimeout: 60_000 });
  const failures = [];
  const ttft = [];
  const perToken = [];
  const gaps = [];
  let next = 0;
  let reads = 0;
  let bursts = 0;
  // Several URLs (the workers of several processes, called directly): one after the other.
  const urls = Array.isArray(url) ? url : [url];
  let sent = 0;
  const metricsBefore = await proxyMetrics(metricsUrl); // resets the loop histogram: what follows is this run's
  // The proxy's resident set, sampled every 20 ms: its peak under this load.
  let peakRss = pid === undefined ? Number.NaN : (rssMb(pid) ?? Number.NaN);
  const sampler = setInterval(() => {
    const now = pid === undefined ? undefined : rssMb(pid);
    if (now !== undefined && now > peakRss) peakRss = now;
  }, 20);
  const cpuBefore = pid === undefined ? undefined : cpuMs(pid);
  const start = performance.now();
  const payload = JSON.stringify(body);
  // A failed request is counted and its reason kept, never thrown: the run goes on and says so.
  const one = () =>
    stream().catch((error) => {
      failures.push(error?.code ?? error?.message ?? String(error));
    });
  const stream = async () => {
    const begin = performance.now();
    const answer = await request(urls[sent++ % urls.length], {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: payload,
      dispatcher,
    });
    let first;
    let last;
    if (answer.statusCode !== 200) {
      // The answer's own words say why (shed, no worker ready, a worker's error): kept, short.
      const said = (await answer.body.text()).replace(/\s+/g, ' ').slice(0, 160);
      throw new Error(`${urls[0]}: status ${answer.statusCode}: ${said}`);
    }
    for await (const chunk of answer.body) {
      const now = performance.now();
      const count = events(chunk);
      if (count === 0) continue;
      reads++;
      if (count > 1) bursts++;
      if (first === undefined) first = now - begin;
      else gaps.push(now - last);
      for (let i = 1; i < count; i++) gaps.push(0);
      last = now;
    }
    const total = performance.now() - begin;
    ttft.push(first ?? Number.NaN);
    perToken.push((total - (first ?? 0)) / tokens);
  };
  if (rate === undefined) {
    await Promise.all(
      Array.from({ length: concurrency }, async () => {
        while (next < requests) {
          next++;
          await one();
        }
      }),
    );
  } else {
    // Open loop: a request every 1/rate s whatever the answers, the same load for every path
    // (held to maxInFlight at most, when given).
    const started = [];
    let inFlight = 0;
    let slotFreed;
    const ended = () => {
      inFlight--;
      slotFreed?.();
      slotFreed = undefined;
    };
    for (let i = 0; i < requests; i++) {
      const due = start + (i * 1000) / rate;
      const wait = due - performance.now();
      if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
      while (maxInFlight !== undefined && inFlight >= maxInFlight) {
        await new Promise((resolve) => {
          slotFreed = resolve;
        });
      }
      inFlight++;
      started.push(one().then(ended));
    }
    await Promise.all(started);
  }
  const seconds = (performance.now() - start) / 1000;
  const cpuAfter = pid === undefined ? undefined : cpuMs(pid);
  clearInterval(sampler);
  const metricsAfter = await proxyMetrics(metricsUrl);
  const minor = gcBetween(metricsBefore, metricsAfter, 'minor');
  const major = gcBetween(metricsBefore, metricsAfter, 'major');
  const incremental = gcBetween(metricsBefore, metricsAfter, 'incremental');
  await dispatcher.close();
  return {
    ttft: median(ttft),
    ttftP99: p99(ttft),
    perToken: median(perToken),
    gapP50: median(gaps),
    gapP99: p99(gaps),
    rps: requests / seconds,
    cpuPerRequest: cpuBefore === undefined || cpuAfter === undefined ? Number.NaN : (cpuAfter - cpuBefore) / requests,
    peakRss,
    eventLoopDelayP99: metricsAfter.loopP99,
    // The collector's share: its pause ms per request, and a scavenge's mean pause.
    gcMsPerRequest: (minor.ms + major.ms + incremental.ms) / requests,
    scavengeMs: minor.ms / minor.count,
    // How often the client got more than one event in one read: writes gathered on the way.
    burstShare: reads === 0 ? Number.NaN : bursts / reads,
    failed: failures.length,
    failures: [...new Set(failures)],
  };
}

/**
 * Starts a child process and resolves once a line of its output satisfies `ready` (with the
 * JSON of that line when it is JSON, else the line).
 */
export function child(command, args, { cwd, env, ready = (line) => line.startsWith('{') }) {
  const proc = spawn(command, args, { stdio: ['pipe', 'pipe', 'pipe'], cwd, env: { ...process.env, ...env } });
  return new Promise((resolve, reject) => {
    let out = '';
    const look = (chunk) => {
      if (proc.resolved) return; // drained from now on, not kept
      out += chunk;
      const line = out.split('\n').find(ready);
      if (line !== undefined && !proc.resolved) {
        proc.resolved = true;
        let info = line;
        try {
          info = JSON.parse(line);
        } catch {}
        resolve({ proc, info });
      }
    };
    proc.stdout.on('data', look);
    // uvicorn says it is listening on stderr.
    proc.stderr.on('data', (chunk) => {
      if (!proc.resolved) look(chunk);
      if (process.env.BENCH_VERBOSE || String(chunk).startsWith('ELD')) process.stderr.write(chunk);
    });
    proc.on('exit', (code) => {
      if (!proc.resolved) reject(new Error(`${command} ${args.join(' ')} exited with ${code}:\n${out}`));
    });
  });
}
