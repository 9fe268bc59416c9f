import { type ChildProcess, spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import OpenAI from 'openai';
import { afterEach, describe, expect, it } from 'vitest';
import { FakeWorkersUsageError, parseFakeWorkersArgs } from '../../src/cli/fake-workers.js';
import { binUntil, serveBin } from '../support/bin.js';

const root = fileURLToPath(new URL('../..', import.meta.url));
const bin = `${root}/dist/cli.js`;
const children: ChildProcess[] = [];

afterEach(() => {
  for (const child of children.splice(0)) child.kill('SIGKILL');
});

/** Runs the built bin; resolves once `ready` finds what it waits for in stdout. */
function run<T>(
  args: string[],
  ready: (out: string) => T | undefined,
  env: Record<string, string> = {},
): Promise<{ child: ChildProcess; found: T }> {
  return binUntil(args, ready, { children, env });
}

const cleanups: Array<() => unknown> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0)) await cleanup();
});

/** The printed `disagg serve` command run (the built bin), then one completion through it, served as `strategy` says. */
async function servesThrough(command: string, strategy: string, env: Record<string, string> = {}): Promise<string> {
  const { url } = await serveBin(command.split(' '), { env, cleanups });
  const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'none', maxRetries: 0 });
  const { data, response } = await client.completions
    .create({ model: 'fake-model', prompt: 'Say', max_tokens: 3 })
    .withResponse();
  expect(response.headers.get('x-disagg-strategy')).toBe(strategy);
  expect(data.choices[0]?.text).toBe('tok0 tok1 tok2 ');
  return url;
}

describe('disagg fake-workers (built): the router tried in two terminals, without a GPU', () => {
  it.each([
    ['vllm', 'disaggregated-sequential'],
    ['sglang', 'disaggregated-concurrent'],
  ])(
    '%s: the printed disagg serve command serves a completion through the fakes',
    async (connector, strategy) => {
      const { found: command } = await run(
        ['fake-workers', '--connector', connector, '--prefill-port', '0', '--decode-port', '0', '--tokens', '3'],
        (out) => /In another terminal:\n {2}disagg serve (.*)\n/.exec(out)?.[1],
      );
      await servesThrough(command, strategy);
    },
    20_000,
  );

  it.each([
    ['vllm', 'disaggregated-sequential'],
    ['sglang', 'disaggregated-concurrent'],
  ])(
    '%s with --kubernetes: the printed command finds the fakes as pods by label and serves through them',
    async (connector, strategy) => {
      const { found } = await run(
        [
          'fake-workers',
          '--connector',
          connector,
          '--prefill-port',
          '0',
          '--decode-port',
          '0',
          '--prefills',
          '2',
          '--kubernetes',
        ],
        (out) => /In another terminal:\n {2}KUBECONFIG=(\S+) disagg serve (.*)\n/.exec(out) ?? undefined,
      );
      const [, kubeconfig, command] = found as unknown as [string, string, string];
      expect(command).toBe(
        `--connector ${connector} --prefill-selector app=disagg-fake,role=prefill --decode-selector app=disagg-fake,role=decode --k8s-namespace default`,
      );
      const url = await servesThrough(command, strategy, { KUBECONFIG: kubeconfig });
      const ready = (await (await fetch(`${url}/ready`)).json()) as Record<string, unknown>;
      expect(ready).toMatchObject({ ready: true, prefill_workers: 2, decode_workers: 1 });
    },
    20_000,
  );

  it('a fault on every decode call reaches the client as the worker said it', async () => {
    const { found: command } = await run(
      ['fake-workers', '--prefill-port', '0', '--decode-port', '0', '--decode-fault', 'status:503'],
      (out) => /In another terminal:\n {2}disagg serve (.*)\n/.exec(out)?.[1],
    );
    const { found: url } = await run(
      ['serve', ...command.split(' '), '--host', '127.0.0.1', '--port', '0', '--disable-retries'],
      (out) => {
        const line = out.split('\n').find((entry) => entry.includes('disagg serve listening'));
        return line === undefined ? undefined : (JSON.parse(line).url as string);
      },
    );
    const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'none', maxRetries: 0 });
    const failed = await client.completions.create({ model: 'fake-model', prompt: 'x' }).catch((e: unknown) => e);
    expect(failed).toBeInstanceOf(OpenAI.APIError);
    expect((failed as InstanceType<typeof OpenAI.APIError>).status).toBe(502);
  }, 20_000);

  it('a bad argument is one line saying what it takes, exit 2', () => {
    const bad = spawnSync(process.execPath, [bin, 'fake-workers', '--connector', 'tgi'], { encoding: 'utf8' });
    expect(bad.status).toBe(2);
    expect(bad.stderr).toBe(
      'disagg fake-workers: --connector must be vllm, sglang or trtllm, got "tgi"\nSee \'disagg fake-workers --help\'.\n',
    );
  });
});

describe('parseFakeWorkersArgs', () => {
  it('defaults: one vLLM prefill on 8100 and one decode on 8200, on loopback', () => {
    expect(parseFakeWorkersArgs([])).toMatchObject({
      protocol: 'vllm',
      host: '127.0.0.1',
      prefillPort: 8100,
      decodePort: 8200,
      prefills: 1,
      decodes: 1,
      prefillFault: undefined,
    });
  });

  it('faults as the fakes know them; anything else refused naming the choices', () => {
    expect(parseFakeWorkersArgs(['--prefill-fault', 'status:503'])).toMatchObject({
      prefillFault: { type: 'status', status: 503 },
    });
    expect(parseFakeWorkersArgs(['--decode-fault', 'reset'])).toMatchObject({ decodeFault: { type: 'reset' } });
    expect(() => parseFakeWorkersArgs(['--decode-fault', 'status:200'])).toThrow(FakeWorkersUsageError);
    expect(() => parseFakeWorkersArgs(['--decode-fault', 'boom'])).toThrow(
      'must be status:CODE, hang, reset or error-event',
    );
    expect(() => parseFakeWorkersArgs(['--decodes', '0'])).toThrow('--decodes must be a whole number from 1 to 64');
    expect(() => parseFakeWorkersArgs(['--nope'])).toThrow("Unknown option '--nope'");
  });

  it('--kv-events: KV events from port 5557 unless told; not with --kubernetes, nor without a prefill worker', () => {
    expect(parseFakeWorkersArgs([])).toMatchObject({ kvEventsPort: undefined });
    expect(parseFakeWorkersArgs(['--kv-events'])).toMatchObject({ kvEventsPort: 5557 });
    expect(parseFakeWorkersArgs(['--kv-events', '--kv-events-port', '0'])).toMatchObject({ kvEventsPort: 0 });
    expect(() => parseFakeWorkersArgs(['--kv-events', '--kubernetes'])).toThrow('cannot be combined');
    expect(() => parseFakeWorkersArgs(['--kv-events', '--prefills', '0'])).toThrow('needs a prefill worker');
  });
});
