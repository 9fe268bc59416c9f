import { type ChildProcess, spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import OpenAI from 'openai';
import { afterEach, describe, expect, it, vi } from 'vitest';
import {
  type FakeFleetPlan,
  FakeWorkersUsageError,
  parseFakeWorkersArgs,
  startFakeFleet,
} from '../../src/cli/fake-workers.js';
import { fakeWorkers } from '../../src/cli/fake-workers-command.js';
import { DEFAULT_PROFILE, PROFILES, profileSummary, readProfile } from '../../src/simulation/profiles.js';
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

  it('--profile: the printed disagg serve command serves a completion through simulated engines', async () => {
    const { found: command } = await run(
      [
        'fake-workers',
        '--profile',
        DEFAULT_PROFILE,
        '--speedup',
        '1000',
        '--prefill-port',
        '0',
        '--decode-port',
        '0',
        '--tokens',
        '3',
      ],
      (out) =>
        out.includes(`simulating ${DEFAULT_PROFILE} at 1000x`)
          ? /In another terminal:\n {2}disagg serve (.*)\n/.exec(out)?.[1]
          : undefined,
    );
    await servesThrough(command, 'disaggregated-sequential');
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

describe('disagg fake-workers --profile: a simulated fleet', () => {
  it('--profile and --speedup are read; with a profile the answer is as long as asked unless --tokens says', () => {
    expect(parseFakeWorkersArgs([])).toMatchObject({ profile: undefined, speedup: 1, tokens: 8 });
    expect(parseFakeWorkersArgs(['--profile', DEFAULT_PROFILE, '--speedup', '50'])).toMatchObject({
      profile: DEFAULT_PROFILE,
      speedup: 50,
      tokens: undefined,
    });
    expect(parseFakeWorkersArgs(['--profile', DEFAULT_PROFILE, '--tokens', '16'])).toMatchObject({ tokens: 16 });
    expect(parseFakeWorkersArgs(['--list-profiles'])).toBe('list-profiles');
  });

  it('a speed-up without a profile, one that is not a positive number, or a token interval beside a profile is refused', () => {
    expect(() => parseFakeWorkersArgs(['--speedup', '10'])).toThrow('--speedup needs --profile');
    expect(() => parseFakeWorkersArgs(['--profile', DEFAULT_PROFILE, '--speedup', '0'])).toThrow(
      '--speedup must be a number above 0',
    );
    expect(() => parseFakeWorkersArgs(['--profile', DEFAULT_PROFILE, '--speedup', 'fast'])).toThrow(
      '--speedup must be a number above 0',
    );
    expect(() => parseFakeWorkersArgs(['--profile', DEFAULT_PROFILE, '--token-interval-ms', '5'])).toThrow(
      'cannot be combined with --profile',
    );
  });

  it('an unknown profile is one line, the profile error’s, and exit 2', async () => {
    const errors: string[] = [];
    const spy = vi.spyOn(console, 'error').mockImplementation((line: string) => errors.push(line));
    try {
      expect(await fakeWorkers(['--profile', 'no-such-profile', '--prefill-port', '0', '--decode-port', '0'])).toBe(2);
    } finally {
      spy.mockRestore();
    }
    expect(errors).toHaveLength(1);
    expect(errors[0]).toMatch(/^disagg fake-workers: No profile is named no-such-profile: the built-in ones are /);
  });

  it('--list-profiles prints each built-in profile on a line', async () => {
    const lines: string[] = [];
    const spy = vi.spyOn(console, 'log').mockImplementation((line: string) => lines.push(line));
    try {
      expect(await fakeWorkers(['--list-profiles'])).toBe(0);
    } finally {
      spy.mockRestore();
    }
    expect(lines).toEqual([...PROFILES.values()].map(profileSummary));
  });

  it('the fleet of a plan with a profile runs a simulated engine of it in every worker', async () => {
    const plan = parseFakeWorkersArgs([
      '--profile',
      DEFAULT_PROFILE,
      '--speedup',
      '100',
      '--prefill-port',
      '0',
      '--decode-port',
      '0',
    ]);
    const profile = await readProfile(DEFAULT_PROFILE);
    const fleet = await startFakeFleet(plan as FakeFleetPlan, profile);
    cleanups.push(() => Promise.all([...fleet.prefill, ...fleet.decode].map((worker) => worker.close())));
    for (const worker of [...fleet.prefill, ...fleet.decode]) {
      expect(worker.simulation?.profile).toBe(profile);
      expect(worker.simulation?.clock.speedup).toBe(100);
    }
  });
});
