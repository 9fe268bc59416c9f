// Precise routing through the built bin, loud when it is blind: `disagg serve` listening for KV
// events where nothing publishes goes blind after the requests it sends (a warning naming the
// worker, the endpoint and what to check; the view untrusted; counted), and `disagg
// fake-workers --kv-events` with the serve command it prints routes a repeated prompt by prefix.
import { type ChildProcess, spawn } from 'node:child_process';
import { createServer } from 'node:net';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { serveBin } from '../support/bin.js';
import { eventually, eventuallyAsync, fakeWorkers } from '../support/http.js';

const bin = fileURLToPath(new URL('../../dist/cli.js', import.meta.url));
const fakes = fakeWorkers();
const cleanups: Array<() => unknown> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/** A prompt of four 16-token blocks, as token ids (no tokenizer needed to match them). */
const prompt = (from: number) => Array.from({ length: 64 }, (_, i) => from + i);

/** One completion through the proxy; the prefill worker that served it. */
async function complete(url: string, ids: number[]): Promise<string | null> {
  const response = await fetch(`${url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'fake-model', prompt: ids, max_tokens: 2 }),
  });
  expect(response.status).toBe(200);
  await response.text();
  return response.headers.get('x-disagg-prefill-worker');
}

/** The value of one series at a scrape (`name{labels} value`), or undefined. */
async function series(metricsUrl: string, line: string): Promise<number | undefined> {
  const text = await (await fetch(metricsUrl)).text();
  const found = text.split('\n').find((each) => each.startsWith(`${line} `));
  return found === undefined ? undefined : Number(found.slice(line.length + 1));
}

/** A loopback port nothing listens on. */
async function silentPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise((resolve) => server.close(resolve));
  return port;
}

describe('precise-prefix through the built bin, loud when blind', () => {
  it('KV events expected where nothing publishes: after its requests the worker goes blind, warned of with the endpoint and a hint, untrusted, counted', async () => {
    const [prefill, decode] = await Promise.all([
      fakes.start({ role: 'prefill', protocol: 'vllm' }),
      fakes.start({ role: 'decode', protocol: 'vllm', tokens: 2 }),
    ]);
    const port = await silentPort();
    const served = await serveBin(
      [
        '--connector',
        'vllm',
        '--prefill',
        prefill.url,
        '--decode',
        decode.url,
        '--prefill-policy',
        'precise-prefix',
        '--kv-events-port',
        String(port),
        '--kv-events-silence-ms',
        '200',
        '--metrics-port',
        '0',
      ],
      { cleanups },
    );
    const metrics = served.listening.metrics as string;
    expect(await series(metrics, 'disagg_kv_view_trusted{worker="prefill-0"}')).toBe(1);
    await complete(served.url, prompt(1000));
    await complete(served.url, prompt(2000));
    await eventuallyAsync(
      async () => (await series(metrics, 'disagg_kv_view_trusted{worker="prefill-0"}')) === 0,
      'the view of prefill-0 untrusted',
      2_000,
    );
    expect(await series(metrics, 'disagg_kv_views_blind_total{worker="prefill-0"}')).toBe(1);
    // The decode worker computed no prompt (its KV came from prefill): not blind.
    expect(await series(metrics, 'disagg_kv_view_trusted{worker="decode-0"}')).toBe(1);
    const warnings = () =>
      served.output.out
        .split('\n')
        .filter((line) => line.includes('"level":40') && line.includes('No KV cache events'))
        .map((line) => JSON.parse(line) as Record<string, unknown>);
    // The log line is written on its own time (pino's stream): waited for, then read whole.
    await eventually(() => warnings().length > 0, 'the warning of a blind view', 2_000);
    await complete(served.url, prompt(3000));
    expect(warnings()).toHaveLength(1);
    const [warning] = warnings();
    expect(warning).toMatchObject({ worker: 'prefill-0', endpoint: `tcp://127.0.0.1:${port}` });
    expect(warning?.hint).toContain(`--kv-events-port ${port}`);
    expect(warning?.hint).toContain('--kv-events-config');
  }, 30_000);

  it('fake-workers --kv-events and the command it prints: events applied, every view trusted, a repeated prompt routed by its prefix', async () => {
    const child: ChildProcess = spawn(
      process.execPath,
      [
        bin,
        'fake-workers',
        '--kv-events',
        '--prefills',
        '2',
        '--prefill-port',
        '0',
        '--decode-port',
        '0',
        '--kv-events-port',
        '0',
      ],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    cleanups.push(() => child.kill('SIGTERM'));
    let out = '';
    child.stdout?.on('data', (chunk: Buffer) => {
      out += chunk.toString();
    });
    const command = () => /In another terminal:\n {2}disagg serve (.*)\n/.exec(out)?.[1];
    await eventuallyAsync(async () => command() !== undefined, 'the printed serve command', 2_000);
    const printed = command() as string;
    expect(printed).toMatch(
      /^--prefill-policy precise-prefix --kv-events-port \d+ --kv-events-replay-port \d+ --config \S+$/,
    );
    const served = await serveBin([...printed.split(' '), '--metrics-port', '0'], { cleanups });
    const metrics = served.listening.metrics as string;
    const P = prompt(1000);
    const first = await complete(served.url, P);
    expect(first).toMatch(/^prefill-[01]$/);
    await eventuallyAsync(
      async () => (await series(metrics, `disagg_kv_blocks{worker="${first}"}`)) === 4,
      `the four blocks of the prompt indexed on ${first}`,
      2_000,
    );
    for (let i = 0; i < 4; i++) expect(await complete(served.url, P)).toBe(first);
    expect(await series(metrics, `disagg_kv_predicted_cached_tokens_total{worker="${first}"}`)).toBe(4 * 64);
    expect(await series(metrics, `disagg_kv_events_total{worker="${first}"}`)).toBeGreaterThan(0);
    for (const worker of ['prefill-0', 'prefill-1', 'decode-0']) {
      expect(await series(metrics, `disagg_kv_view_trusted{worker="${worker}"}`)).toBe(1);
    }
  }, 30_000);
});
