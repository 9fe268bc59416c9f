// The client side of bench/proxy.mjs: streamed requests against one path, with what each
// stream saw (time to the first token, the gaps between tokens) and what the proxy process
// spent on them (its CPU time, read from /proc before and after the run; its resident set,
// sampled during the run; a disagg proxy's event loop delay, from its /metrics).
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { Agent, request } from 'undici';

export const median = (values) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)];
export const p99 = (values) => [...values].sort((a, b) => a - b)[Math.floor(values.length * 0.99)];

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
 * The event loop's delay p99 of a disagg proxy, in ms, since the last time its /metrics was
 * read (prom-client resets the delay histogram on every read), or NaN: how much later than
 * due its 10 ms probe ran (prom-client's figure is the whole interval, the 10 ms included).
 */
export async function eventLoopP99(metricsUrl) {
  if (metricsUrl === undefined) return Number.NaN;
  const answer = await request(metricsUrl);
  const text = await answer.body.text();
  const line = text.split('\n').find((l) => l.startsWith('nodejs_eventloop_lag_p99_seconds '));
  return line === undefined ? Number.NaN : Math.max(0, Number(line.split(' ')[1]) * 1000 - PROBE_MS);
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
  await eventLoopP99(metricsUrl); // resets the proxy's histogram: what follows is this run's
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
    const answer = await request(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: payload,
      dispatcher,
    });
    let first;
    let last;
    for await (const chunk of answer.body) {
      const now = performance.now();
      const count = events(chunk);
      if (count === 0) continue;
      if (first === undefined) first = now - begin;
      else gaps.push(now - last);
      for (let i = 1; i < count; i++) gaps.push(0);
      last = now;
    }
    if (answer.statusCode !== 200) throw new Error(`${url}: status ${answer.statusCode}`);
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
  const eventLoopDelayP99 = await eventLoopP99(metricsUrl);
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
    eventLoopDelayP99,
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
