// `disagg fake-workers`: fake prefill and decode workers on this machine, so that a newcomer
// tries the router in two terminals without a GPU. Part of the command-line tool: it writes
// to the console.
import { parseArgs } from 'node:util';
import { BOOTSTRAP_PORT_ANNOTATION, WORKER_PORTS_ANNOTATION } from '../discovery/kubernetes-discovery.js';
import { ENGINE_NAMES, type EngineName, engineOf } from '../engines/registry.js';
import type { EngineProfile } from '../simulation/profile-types.js';
import type { FakePod } from '../testing/fake-kubernetes-api.js';
import { type FakeWorker, type FakeWorkerOptions, type Fault, startFakeWorker } from '../testing/fake-worker.js';

/** The help text of `disagg fake-workers`. */
export const FAKE_WORKERS_USAGE = `Usage: disagg fake-workers [options]

Starts fake prefill and decode workers that speak an engine's disaggregated protocol (no GPU,
no model), prints the disagg serve command that fronts them, and runs until interrupted.

Options:
  --connector vllm|sglang|trtllm  the engine the fakes behave as (vllm)
  --host HOST                     the address they listen on (127.0.0.1)
  --prefill-port N                the first prefill worker's port (8100; 0: any free port)
  --decode-port N                 the first decode worker's port (8200; 0: any free port)
  --prefills N                    how many prefill workers, on consecutive ports (1)
  --decodes N                     how many decode workers, on consecutive ports (1)
  --tokens N                      tokens a decode answers at most (8; with --profile, as many
                                  as the request's max_tokens asks or its context leaves)
  --token-interval-ms N           the time between two tokens (20; not with --profile)
  --profile NAME|FILE             each worker runs a simulated engine of this profile (a built-in
                                  name, or a profile's JSON file): its prefills, KV transfers and
                                  decode steps take the profile's time, its /metrics report the
                                  engine's queues and KV cache usage, and with --kv-events it
                                  publishes the engine's cache (blocks of 512 tokens)
  --speedup X                     with --profile, the simulated time runs X times faster than
                                  the wall's (1)
  --list-profiles                 the built-in profiles, one a line
  --model NAME                    the model the fakes serve (fake-model)
  --prefill-fault FAULT           every prefill call fails so: status:CODE, hang, reset, error-event
  --decode-fault FAULT            every decode call fails so (the same faults)
  --kubernetes                    also serve a fake Kubernetes API listing the workers as pods
                                  (labels app=disagg-fake,role=prefill|decode), and print the
                                  disagg serve command that finds them by label
  --kubernetes-port N             the fake Kubernetes API's port (0: any free port)
  --kv-events                     the workers keep a prefix cache in blocks of 16 tokens and
                                  publish its KV cache events over ZMQ as vLLM does
                                  (--kv-events-config publisher zmq: a PUB socket and a replay
                                  socket each), and the printed command routes on them
                                  (--prefill-policy precise-prefix --kv-events-port N):
                                  rehearse precise routing without a GPU
  --kv-events-port N              the first prefill worker's KV event port; its replay socket
                                  is on N + 1, the next workers' on the ports after (5557;
                                  0: any free ports)
  --help                          this text

SGLang fakes serve their bootstrap on their HTTP port: the printed command names it.
With --kv-events, prompts given as token ids route by prefix as they are; text prompts need
disagg serve --tokenizer to match, and otherwise keep the workers' views alive all the same.
`;

const OPTIONS = {
  connector: { type: 'string', default: 'vllm' },
  host: { type: 'string', default: '127.0.0.1' },
  'prefill-port': { type: 'string', default: '8100' },
  'decode-port': { type: 'string', default: '8200' },
  prefills: { type: 'string', default: '1' },
  decodes: { type: 'string', default: '1' },
  tokens: { type: 'string' },
  'token-interval-ms': { type: 'string' },
  model: { type: 'string', default: 'fake-model' },
  'prefill-fault': { type: 'string' },
  'decode-fault': { type: 'string' },
  kubernetes: { type: 'boolean' },
  'kubernetes-port': { type: 'string', default: '0' },
  'kv-events': { type: 'boolean' },
  'kv-events-port': { type: 'string', default: '5557' },
  profile: { type: 'string' },
  speedup: { type: 'string' },
  'list-profiles': { type: 'boolean' },
  help: { type: 'boolean', short: 'h' },
} as const;

// Defaults of the options that mean something else when not given (with --profile).
const UNSET_DEFAULTS: Readonly<Record<string, string>> = { tokens: '8', 'token-interval-ms': '20' };

/** What `disagg fake-workers` was asked for. */
export interface FakeFleetPlan {
  protocol: FakeWorkerOptions['protocol'];
  host: string;
  prefillPort: number;
  decodePort: number;
  prefills: number;
  decodes: number;
  /** Tokens a decode answers at most; undefined with a profile: the request's budget, or what the context leaves. */
  tokens: number | undefined;
  tokenIntervalMs: number;
  model: string;
  prefillFault: Fault | undefined;
  decodeFault: Fault | undefined;
  /** The fake Kubernetes API's port, when the workers are to be found as pods. */
  kubernetesPort: number | undefined;
  /** The first prefill worker's KV event port (0: any free ports), when they publish KV events. */
  kvEventsPort: number | undefined;
  /** The simulated engines' profile (a built-in name or a file), when the workers simulate one. */
  profile: string | undefined;
  /** Virtual ms per wall ms of the simulated engines. */
  speedup: number;
}

/** A problem with the arguments of `disagg fake-workers`: one line that says what to change. */
export class FakeWorkersUsageError extends Error {}

/**
 * Reads the arguments of `disagg fake-workers`.
 *
 * @returns the plan, `'help'`, or `'list-profiles'`.
 * @throws {FakeWorkersUsageError} naming the argument and what it takes.
 */
export function parseFakeWorkersArgs(args: string[]): FakeFleetPlan | 'help' | 'list-profiles' {
  let values: Record<string, string | boolean | undefined>;
  try {
    values = parseArgs({ args, options: OPTIONS, strict: true, allowPositionals: false }).values;
  } catch (error) {
    throw new FakeWorkersUsageError((error as Error).message.split('. ')[0] as string);
  }
  if (values.help === true) return 'help';
  if (values['list-profiles'] === true) return 'list-profiles';
  const protocol = values.connector as string;
  if (!(ENGINE_NAMES as readonly string[]).includes(protocol)) {
    throw new FakeWorkersUsageError(
      `--connector must be ${ENGINE_NAMES.slice(0, -1).join(', ')} or ${ENGINE_NAMES.at(-1)}, got ${JSON.stringify(protocol)}`,
    );
  }
  const count = (name: string, min: number, max: number): number => {
    const text = (values[name] as string | undefined) ?? UNSET_DEFAULTS[name] ?? '';
    const value = Number(text);
    if (!Number.isInteger(value) || value < min || value > max) {
      throw new FakeWorkersUsageError(
        `--${name} must be a whole number from ${min} to ${max}, got ${JSON.stringify(text)}`,
      );
    }
    return value;
  };
  const kvEventsPort = values['kv-events'] === true ? count('kv-events-port', 0, 65535) : undefined;
  if (kvEventsPort !== undefined && values.kubernetes === true) {
    throw new FakeWorkersUsageError('--kv-events and --kubernetes cannot be combined: choose one');
  }
  if (kvEventsPort !== undefined && count('prefills', 0, 64) === 0) {
    throw new FakeWorkersUsageError('--kv-events needs a prefill worker: --prefills 1 or more');
  }
  const profile = values.profile as string | undefined;
  if (profile === undefined && values.speedup !== undefined) {
    throw new FakeWorkersUsageError('--speedup needs --profile: only a simulated engine keeps time');
  }
  const speedup = Number(values.speedup ?? '1');
  if (!(Number.isFinite(speedup) && speedup > 0 && speedup <= 1_000_000)) {
    throw new FakeWorkersUsageError(
      `--speedup must be a number above 0 and at most 1000000, got ${JSON.stringify(values.speedup)}`,
    );
  }
  if (profile !== undefined && values['token-interval-ms'] !== undefined) {
    throw new FakeWorkersUsageError('--token-interval-ms cannot be combined with --profile: the engine keeps the time');
  }
  return {
    protocol: protocol as EngineName,
    host: values.host as string,
    prefillPort: count('prefill-port', 0, 65535),
    decodePort: count('decode-port', 0, 65535),
    prefills: count('prefills', 0, 64),
    decodes: count('decodes', 1, 64),
    tokens: values.tokens === undefined && profile !== undefined ? undefined : count('tokens', 1, 1_000_000),
    tokenIntervalMs: count('token-interval-ms', 0, 60_000),
    model: values.model as string,
    prefillFault: faultOf('prefill-fault', values['prefill-fault'] as string | undefined),
    decodeFault: faultOf('decode-fault', values['decode-fault'] as string | undefined),
    kubernetesPort: values.kubernetes === true ? count('kubernetes-port', 0, 65535) : undefined,
    kvEventsPort,
    profile,
    speedup,
  };
}

function faultOf(name: string, text: string | undefined): Fault | undefined {
  if (text === undefined) return undefined;
  const [type, argument] = text.split(':');
  if (type === 'status') {
    const status = Number(argument);
    if (!Number.isInteger(status) || status < 400 || status > 599) {
      throw new FakeWorkersUsageError(`--${name} status:CODE takes a 4xx or 5xx code, got ${JSON.stringify(text)}`);
    }
    return { type: 'status', status };
  }
  if (type === 'hang' || type === 'reset' || type === 'error-event') return { type };
  throw new FakeWorkersUsageError(
    `--${name} must be status:CODE, hang, reset or error-event, got ${JSON.stringify(text)}`,
  );
}

/**
 * The workers of a plan, started; the first of a role on its port, the rest on the next ones.
 * Given `profile` (the plan's, read), each runs a simulated engine of it.
 */
export async function startFakeFleet(
  plan: FakeFleetPlan,
  profile?: EngineProfile,
): Promise<{ prefill: FakeWorker[]; decode: FakeWorker[] }> {
  const started: FakeWorker[] = [];
  const start = async (role: 'prefill' | 'decode', index: number): Promise<FakeWorker> => {
    const first = role === 'prefill' ? plan.prefillPort : plan.decodePort;
    // Two ports per worker (events, replay): the prefill workers first, then the decode ones.
    const kvPort = (slot: number) =>
      plan.kvEventsPort === 0 || plan.kvEventsPort === undefined ? 0 : plan.kvEventsPort + slot;
    const slot = 2 * (role === 'prefill' ? index : plan.prefills + index);
    const fault = role === 'prefill' ? plan.prefillFault : plan.decodeFault;
    const worker = await startFakeWorker({
      role,
      protocol: plan.protocol,
      host: plan.host,
      port: first === 0 ? 0 : first + index,
      ...(plan.tokens === undefined ? {} : { tokens: plan.tokens }),
      tokenIntervalMs: plan.tokenIntervalMs,
      ...(profile === undefined ? {} : { simulated: { profile, speedup: plan.speedup } }),
      model: plan.model,
      ...(fault === undefined ? {} : { fault }),
      ...(plan.kvEventsPort === undefined ? {} : { kvCache: { port: kvPort(slot), replayPort: kvPort(slot + 1) } }),
    });
    started.push(worker);
    return worker;
  };
  try {
    const prefill: FakeWorker[] = [];
    for (let i = 0; i < plan.prefills; i++) prefill.push(await start('prefill', i));
    const decode: FakeWorker[] = [];
    for (let i = 0; i < plan.decodes; i++) decode.push(await start('decode', i));
    return { prefill, decode };
  } catch (error) {
    // A port in use: the ones already up go too, so nothing is left listening.
    await Promise.all(started.map((worker) => worker.close()));
    throw error;
  }
}

/**
 * The `disagg serve` command that fronts the fleet. An SGLang fake serves its bootstrap on its
 * HTTP port: one prefill gets `--bootstrap-port`; several, each its own, need a config file
 * (a flag gives one port for all), whose text is returned to be written.
 */
export function serveCommand(
  plan: FakeFleetPlan,
  fleet: { prefill: FakeWorker[]; decode: FakeWorker[] },
): { command: string; configFile?: string } {
  if (plan.kvEventsPort !== undefined) return kvEventsServeCommand(plan, fleet);
  const flags = [
    `--connector ${plan.protocol}`,
    ...fleet.prefill.map((worker) => `--prefill ${worker.url}`),
    ...fleet.decode.map((worker) => `--decode ${worker.url}`),
  ];
  if (!engineOf(plan.protocol).prefillBootstrap || fleet.prefill.length === 0)
    return { command: `disagg serve ${flags.join(' ')}` };
  if (fleet.prefill.length === 1) {
    return { command: `disagg serve ${flags.join(' ')} --bootstrap-port ${fleet.prefill[0]?.bootstrapPort}` };
  }
  const configFile = [
    'connector: sglang',
    'prefill:',
    ...fleet.prefill.map((worker) => `  - { url: ${worker.url}, bootstrapPort: ${worker.bootstrapPort} }`),
    'decode:',
    ...fleet.decode.map((worker) => `  - ${worker.url}`),
    '',
  ].join('\n');
  return { command: 'disagg serve --config', configFile };
}

/**
 * The `disagg serve` command that routes on the fakes' KV events: precise-prefix, the first
 * prefill worker followed at `--kv-events-port` on its host as a real fleet's workers are, and
 * the others named with their own endpoints in the config file (fakes share one address, so
 * each publishes on ports of its own).
 */
function kvEventsServeCommand(
  plan: FakeFleetPlan,
  fleet: { prefill: FakeWorker[]; decode: FakeWorker[] },
): { command: string; configFile: string } {
  const bootstrap = engineOf(plan.protocol).prefillBootstrap;
  const entry = (worker: FakeWorker, own: boolean) => {
    const fields = [
      `url: ${worker.url}`,
      ...(bootstrap && worker.role === 'prefill' ? [`bootstrapPort: ${worker.bootstrapPort}`] : []),
      ...(own
        ? [
            `kvEvents: ${worker.kvCache?.publisher.endpoint}`,
            `kvEventsReplay: ${worker.kvCache?.publisher.replayEndpoint}`,
          ]
        : []),
    ];
    return `  - { ${fields.join(', ')} }`;
  };
  const [first] = fleet.prefill as [FakeWorker];
  const configFile = [
    `connector: ${plan.protocol}`,
    'prefill:',
    ...fleet.prefill.map((worker, i) => entry(worker, i > 0)),
    'decode:',
    ...fleet.decode.map((worker) => entry(worker, true)),
    '',
  ].join('\n');
  const port = (endpoint: string | undefined) => endpoint?.slice(endpoint.lastIndexOf(':') + 1);
  const command = [
    'disagg serve --prefill-policy precise-prefix',
    `--kv-events-port ${port(first.kvCache?.publisher.endpoint)}`,
    `--kv-events-replay-port ${port(first.kvCache?.publisher.replayEndpoint)}`,
    '--config',
  ].join(' ');
  return { command, configFile };
}

/** The label of the fake pods (`app=disagg-fake`), with `role=prefill` or `role=decode`. */
export const FAKE_POD_APP = 'disagg-fake';

/**
 * The fleet as pods for the fake Kubernetes API: one pod per worker, named `fake-<role>-<i>`,
 * in `default`, at the workers' address, its port in the `smg.ai/worker-ports` annotation (the
 * fakes of one role listen on consecutive ports of one address, where real pods would share a
 * port on addresses of their own); an SGLang prefill's bootstrap port in `sglang.ai/bootstrap-port`.
 */
export function fakePods(plan: FakeFleetPlan, fleet: { prefill: FakeWorker[]; decode: FakeWorker[] }): FakePod[] {
  return (['prefill', 'decode'] as const).flatMap((role) =>
    fleet[role].map((worker, i): FakePod => {
      const url = new URL(worker.url);
      return {
        name: `fake-${role}-${i}`,
        namespace: 'default',
        labels: { app: FAKE_POD_APP, role },
        ip: podHost(url.hostname.replace(/^\[|\]$/g, '')),
        annotations: {
          [WORKER_PORTS_ANNOTATION]: url.port,
          ...(role === 'prefill' && engineOf(plan.protocol).prefillBootstrap
            ? { [BOOTSTRAP_PORT_ANNOTATION]: String(worker.bootstrapPort) }
            : {}),
        },
      };
    }),
  );
}

/** The `disagg serve` command that finds the fake pods by label through the kubeconfig at `kubeconfig`. */
export function kubernetesServeCommand(plan: FakeFleetPlan, kubeconfig: string): string {
  return [
    `KUBECONFIG=${kubeconfig} disagg serve`,
    `--connector ${plan.protocol}`,
    `--prefill-selector app=${FAKE_POD_APP},role=prefill`,
    `--decode-selector app=${FAKE_POD_APP},role=decode`,
    '--k8s-namespace default',
  ].join(' ');
}

/** Where workers listening on `host` are reached: loopback for a wildcard address. */
export function podHost(host: string): string {
  return host === '0.0.0.0' || host === '::' ? '127.0.0.1' : host;
}
