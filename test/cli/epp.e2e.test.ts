// `disagg epp` as an operator runs it: the built bin, fake pods, the scripted Envoy, SIGTERM.
import { spawn, spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { request } from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import { envoyStandIn, requestBody, requestHeaders, setHeader } from '../support/envoy-stand-in.js';
import { fakeWorkers } from '../support/http.js';

const root = fileURLToPath(new URL('../..', import.meta.url));
const bin = `${root}/dist/cli.js`;
const fakes = fakeWorkers();
const cleanups: Array<() => unknown> = [];
afterEach(async () => {
  await Promise.all(cleanups.splice(0).map((cleanup) => cleanup()));
});

/** Starts `disagg epp` on free ports; resolves with its listening line once it logs it. */
async function startEpp(args: string[]) {
  const child = spawn(
    process.execPath,
    [
      bin,
      'epp',
      '--host',
      '127.0.0.1',
      '--port',
      '0',
      '--health-port',
      '0',
      '--metrics-port',
      '0',
      '--drain-delay-ms',
      '0',
      ...args,
    ],
    {
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  const output = { out: '', err: '' };
  const exited = new Promise<number | null>((resolve) => child.on('exit', resolve));
  cleanups.push(() => {
    child.kill('SIGKILL');
  });
  const listening = await new Promise<Record<string, string>>((resolve, reject) => {
    child.stdout.on('data', (chunk: Buffer) => {
      output.out += chunk.toString();
      const line = output.out.split('\n').find((entry) => entry.includes('disagg epp listening'));
      if (line !== undefined) resolve(JSON.parse(line));
    });
    child.stderr.on('data', (chunk: Buffer) => {
      output.err += chunk.toString();
    });
    exited.then((code) => reject(new Error(`disagg epp exited ${code}: ${output.out}${output.err}`)));
  });
  return { child, listening, exited, output };
}

const portOf = (address: string) => Number(address.split(':').at(-1));

/** The workers every refusal case names (nothing listens there: the command stops before calling them). */
const WORKERS = ['--connector', 'vllm', '--decode', 'http://127.0.0.1:2', '--prefill', 'http://127.0.0.1:1'];

describe('disagg epp', () => {
  it('picks a decode pod and its prefill pod for a request through Envoy, serves metrics, and stops cleanly on SIGTERM', async () => {
    const prefill = await fakes.start({ role: 'prefill', protocol: 'vllm' });
    const decode = await fakes.start({ role: 'decode', protocol: 'vllm' });
    const { child, listening, exited, output } = await startEpp([
      '--connector',
      'vllm',
      '--prefill',
      prefill.url,
      '--decode',
      decode.url,
    ]);
    const envoy = envoyStandIn(portOf(listening.extProc as string));
    cleanups.push(() => envoy.close());
    const call = envoy.open();
    call.send(requestHeaders('/v1/completions'));
    call.send(requestBody(JSON.stringify({ model: 'fake-model', prompt: 'Hi', max_tokens: 2 }), true));
    const mutation = (await call.next()).request_headers.response.header_mutation;
    expect(setHeader(mutation, 'x-gateway-destination-endpoint')).toBe(new URL(decode.url).host);
    expect(setHeader(mutation, 'x-prefiller-host-port')).toBe(new URL(prefill.url).host);
    call.cancel();
    await call.closed;
    const metrics = await (await request(listening.metrics as string)).body.text();
    expect(metrics).toContain('disagg_epp_picks_total{result="disaggregated"} 1');
    child.kill('SIGTERM');
    expect(await exited).toBe(0);
    expect(output.out).toContain('"msg":"Stopped"');
    expect(output.err).toBe('');
  });

  it.each([
    [['--prefill-from', 'header'], "disagg epp: --prefill-from header is a sidecar's"],
    [['--preempt'], "disagg epp: --preempt (preempt) is disagg serve's: an endpoint picker only picks the pods"],
    [['--health-port', 'nine'], 'disagg epp: --health-port must be a port number'],
  ])('refuses %j in one line, exit 2', (flags, said) => {
    const run = spawnSync(process.execPath, [bin, 'epp', ...WORKERS, ...flags], {
      encoding: 'utf8',
      timeout: 20_000,
    });
    expect(run.status).toBe(2);
    expect(run.stderr.split('\n')[0]).toContain(said);
    expect(run.stderr).not.toMatch(/\n\s+at /);
  });

  it('without its gRPC packages (an install with --omit=optional): one line saying what to install, exit 1', () => {
    const run = spawnSync(
      process.execPath,
      [
        '--import',
        `${root}/test/support/without-packages.mjs`,
        bin,
        'epp',
        ...WORKERS,
        '--port',
        '0',
        '--health-port',
        '0',
        '--metrics-port',
        '0',
      ],
      { encoding: 'utf8', env: { ...process.env, HIDE_PACKAGES: '@grpc/grpc-js' }, timeout: 20_000 },
    );
    expect(run.status).toBe(1);
    const lines = run.stderr.split('\n').filter((line) => line !== '');
    expect(lines).toEqual([
      'disagg epp: disagg epp needs @grpc/grpc-js, @grpc/proto-loader and grpc-health-check (optional dependencies): npm install @grpc/grpc-js @grpc/proto-loader grpc-health-check',
    ]);
  });

  it('prints its own settings and those of disagg serve with --help', () => {
    const run = spawnSync(process.execPath, [bin, 'epp', '--help'], { encoding: 'utf8' });
    expect(run.status).toBe(0);
    expect(run.stdout).toMatch(/--health-port N/);
    expect(run.stdout).toMatch(/--prefill-selector/);
  });
});
