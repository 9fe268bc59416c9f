// A simulated fleet routed by `disagg serve`'s own pipeline: the settings read by the same
// table, the pool and its scheduler built by the same function (`modelPool`), its plugins fed
// what they declare (the engines' KV events into the same block index, their load sampled at
// the configured interval), and each request's verdict and decision taken as the proxy's
// prepare and decide stages take them. Only HTTP is left out.

import { KvBlockIndex } from '../kv/block-index.js';
import { loadBlockKeys } from '../kv/block-keys.js';
import type { KvEvent } from '../kv/kv-events.js';
import type { EngineLoad } from '../protocol/engines/load-metrics.js';
import { RoutingInput } from '../routing/routing-input.js';
import type { LatencyFeatures } from '../routing/slo/latency-predictor.js';
import { shedForServiceLevels } from '../routing/slo/shedding-rule.js';
import type { Lease } from '../routing/worker-pool.js';
import { modelPool } from '../server/fleet/model-pools.js';
import { consumedBy, routingServices } from '../server/fleet/routing-policies.js';
import { Admission, OverloadedError } from '../server/pipeline/admission.js';
import { resolveProxyOptions } from '../server/settings/resolve.js';
import { ConfigError } from '../server/settings/setting.js';
import type { ResolvedProxyOptions, ServeConfig } from '../server/settings/types.js';
import type { KvTreeEvent } from '../simulation/kv-tree.js';
import type { EngineProfile } from '../simulation/profile-types.js';
import type { ServiceLevels, SimDecision, SimEnding, SimLease, SimRouter } from '../simulation/replay.js';
import { SimEngine } from '../simulation/sim-engine.js';
import { TRACE_BLOCK_TOKENS, type TraceRequest } from '../simulation/trace.js';
import type { VirtualClock } from '../simulation/virtual-clock.js';
import { SeededRandom } from '../simulation/workload-random.js';
import { dropUndefined } from './serve-parts.js';

/** The model the simulated requests name. */
const SIMULATED_MODEL = 'simulated';

/** The simulated fleet's shape: prefill and decode workers (no prefill: every worker serves whole requests). */
export interface FleetShape {
  readonly prefill: number;
  readonly decode: number;
}

/** A simulated fleet: its engines by address, and the router in front of them. */
export interface SimulatedFleet {
  readonly engines: ReadonlyMap<string, SimEngine>;
  readonly router: SimRouter;
}

/** The address a simulated worker goes by (never dialled: the fleet is in this process). */
export function simulatedWorkerUrl(role: 'prefill' | 'decode', index: number): string {
  return `http://sim-${role}-${index}:8000`;
}

/**
 * The serve settings a fleet of this shape is routed with: the simulated workers as the
 * pools, the profile's engine as the connector, then `args` as `disagg serve` reads them. The
 * KV events' port is set where none is given: the simulated engines publish their events to
 * the router in-process.
 *
 * @throws {ConfigError} for a setting `disagg serve` refuses, or one that names workers of its
 *   own (the simulation makes them).
 */
export function simulatedSettings(
  shape: FleetShape,
  engine: EngineProfile['engine'],
  args: readonly string[],
  load: (args: string[]) => ServeConfig | 'help',
): ResolvedProxyOptions {
  const own = [
    '--prefill',
    '--decode',
    '--pools',
    '--prefill-dns',
    '--decode-dns',
    '--prefill-selector',
    '--decode-selector',
  ];
  const named = args.find((arg) => own.includes(arg.split('=')[0] as string));
  if (named !== undefined)
    throw new ConfigError(
      `disagg simulate makes its own workers: drop ${named.split('=')[0]} (--prefill N and --decode M count them)`,
    );
  const workers = (role: 'prefill' | 'decode', count: number) =>
    count === 0 ? [] : [`--${role}`, Array.from({ length: count }, (_, i) => simulatedWorkerUrl(role, i)).join(',')];
  const kvPort = args.some((arg) => arg.startsWith('--kv-events-port')) ? [] : ['--kv-events-port', '5557'];
  // The profile's engine, unless the flags name the connector.
  const connector = args.some((arg) => arg.startsWith('--connector')) ? [] : ['--connector', engine];
  // Without prefill workers, a pool of decode workers alone (serve's top level needs both):
  // every request served whole, as `no-prefill-worker`.
  const decodeOnly = [
    '--pools',
    JSON.stringify([{ model: SIMULATED_MODEL, decode: workers('decode', shape.decode)[1]?.split(',') }]),
  ];
  const config = load([
    ...(shape.prefill === 0 ? decodeOnly : [...workers('prefill', shape.prefill), ...workers('decode', shape.decode)]),
    ...connector,
    ...kvPort,
    ...args,
  ]);
  if (config === 'help') throw new ConfigError('--help is disagg simulate --help');
  const { host: _host, port: _port, logLevel: _level, logFormat: _format, tracing: _tracing, ...settings } = config;
  return resolveProxyOptions(dropUndefined(settings) as Parameters<typeof resolveProxyOptions>[0]);
}

/**
 * The fleet: an engine of `profile` per worker of the settings, and the router that is the
 * settings' pool (its scheduler, policies, deciders and the services they read) behind the
 * proxy's admission (its slots, queue and priority bands, as the settings give them). Each
 * request carries its tenant, its priority and its service levels (its own, else `slo`, as a
 * client sending its SLO headers would). Policies that draw at random draw from `seed` (1 by
 * default).
 */
export async function simulatedFleet(
  options: ResolvedProxyOptions,
  profile: EngineProfile,
  clock: VirtualClock,
  seed = 1,
  slo?: ServiceLevels,
): Promise<SimulatedFleet> {
  type Worker = ResolvedProxyOptions['prefill'][number] | ResolvedProxyOptions['decode'][number];
  const consumed = consumedBy(options);
  const wantsIndex = consumed['kv-index'] !== undefined;
  const index = wantsIndex ? new KvBlockIndex<Worker>(await loadBlockKeys(), { now: () => clock.now }) : undefined;
  const engines = new Map<string, SimEngine>();
  const poolSettings = options.pools[0];
  const all =
    poolSettings === undefined
      ? [...options.prefill, ...options.decode]
      : [...poolSettings.prefill, ...poolSettings.decode];
  for (const worker of all as Worker[]) {
    const onKvEvent =
      index === undefined
        ? undefined
        : (event: KvTreeEvent) => {
            const kv = kvEventOf(event);
            if (kv !== undefined) index.apply(worker, kv);
          };
    engines.set(worker.url, new SimEngine({ profile, clock, onKvEvent }));
  }
  const loads = sampledLoads(
    consumed['engine-load'] === undefined ? 0 : options.routing.engineLoadIntervalMs,
    engines,
    clock,
  );
  const random = new SeededRandom(seed);
  const services = {
    ...routingServices<Worker>(
      consumed,
      () => index,
      loads === undefined ? undefined : { loadOf: (worker: Worker) => loads.get(worker.url) },
    ),
    // Policies that draw (random, power-of-two, the weighted-random picker) draw the same for a seed.
    random: () => random.next(),
  };
  const pool = modelPool(options, services, poolSettings);
  const tokens = consumed.tokens !== undefined || wantsIndex;
  // The proxy's admission, on simulated time: its slots, its queue and how long a request may
  // wait in it, preemption where the settings turn it on. (Priority bands' own time-to-live
  // come from a tenants file, which a simulation's requests, naming their priority, do not read.)
  const admission = new Admission({
    maxConcurrent: options.maxConcurrentRequests,
    queueSize: options.queueSize,
    queueTimeoutMs: options.queueTimeoutMs,
    preempt: options.preempt,
    clock,
  });
  const never = new Promise<never>(() => {});
  const { latency } = services;
  // What each request will teach the predictor, where a plugin reads one: the workers' features
  // at dispatch, as the proxy's feed reads them from the flow's events.
  const lessons = new Map<number, Lesson<Worker>>();
  const router: SimRouter = {
    async route(request: TraceRequest, index: number, ending: SimEnding): Promise<SimDecision> {
      const input = new RoutingInput(bodyOf(request), request.session, tokens ? tokenIdsOf(request) : undefined);
      input.priority = request.priority ?? 0;
      const ttftMs = request.sloTtftMs ?? slo?.ttftMs;
      const itlMs = request.sloItlMs ?? slo?.itlMs;
      if (ttftMs !== undefined || itlMs !== undefined) input.serviceLevels = { ttftMs, itlMs };
      let ticket: { release(): void };
      try {
        ticket = await admission.enter(never, {
          tenant: request.tenant ?? 'default',
          priority: input.priority,
          preempt: () => ending.preempt(),
          stoppable: () => ending.stoppable,
        });
      } catch (error) {
        if (OverloadedError.is(error)) return { strategy: 'refused', reason: error.limit };
        throw error;
      }
      // As the prepare stage asks it (a decider that throws: disaggregated), then the decide stage.
      const verdict = await pool.scheduler.verdict(input).catch(() => undefined);
      const decision = pool.scheduler.decide(input, {}, verdict);
      // A sheddable request no worker is predicted to meet: refused before any worker, as the proxy's 429.
      if (shedForServiceLevels(input)) {
        if (decision.strategy === 'disaggregated') decision.prefill?.release();
        decision.decode?.release();
        ticket.release();
        return { strategy: 'refused', reason: 'slo' };
      }
      if (latency !== undefined && decision.decode !== undefined) {
        const decodeWorker = decision.decode.worker as Worker;
        const onDecode = {
          worker: decodeWorker,
          features: latency.features(decodeWorker, input, 'decode', pool.decode.load, { counted: true }),
        };
        const prefillWorker = decision.strategy === 'disaggregated' ? (decision.prefill?.worker as Worker) : undefined;
        const computes =
          prefillWorker === undefined
            ? onDecode
            : {
                worker: prefillWorker,
                features: latency.features(prefillWorker, input, 'prefill', pool.prefill.load, { counted: true }),
              };
        lessons.set(index, { first: computes, decode: onDecode, dispatchedAt: clock.now });
      }
      // The slot is the request's until its decode leg ends, as the proxy's is until its answer does.
      const decode = leaseOf(decision.decode, () => ticket.release());
      if (decision.strategy === 'aggregated' || decision.prefill === undefined) {
        return {
          strategy: 'aggregated',
          reason: decision.strategy === 'aggregated' ? decision.reason : 'no-prefill-worker',
          decode,
        };
      }
      return { strategy: 'disaggregated', prefill: leaseOf(decision.prefill), decode };
    },
    observe(index, observation) {
      // Its KV handed off, it can be stopped: a waiter of higher priority may take its slot now.
      if (observation.type === 'handedOff') {
        admission.recheck();
        return;
      }
      const lesson = lessons.get(index);
      if (latency === undefined || lesson === undefined) return;
      if (observation.type === 'firstToken') {
        latency.learnTtft(lesson.first.worker, lesson.first.features, observation.at - lesson.dispatchedAt);
        return;
      }
      lessons.delete(index);
      // The mean gap of a streamed answer, as the proxy times its chunks: none for one token.
      if (observation.tokens > 1) latency.learnItl(lesson.decode.worker, lesson.decode.features, observation.itlMs);
    },
  };
  return { engines, router };
}

/** What a request will teach the latency predictor: the workers and their features at dispatch. */
interface Lesson<W> {
  /** The worker that computes the prompt (prefill's, or decode's on decode alone). */
  readonly first: { readonly worker: W; readonly features: LatencyFeatures };
  readonly decode: { readonly worker: W; readonly features: LatencyFeatures };
  readonly dispatchedAt: number;
}

/** A pool's lease as the replay holds it, `alsoRelease` with it. */
function leaseOf(lease: Lease<{ url: string }> | undefined, alsoRelease?: () => void): SimLease {
  if (lease === undefined) throw new RangeError('The pool leased no decode worker');
  return {
    worker: lease.worker.url,
    release: (outcome) => {
      lease.release(outcome);
      alsoRelease?.();
    },
  };
}

/**
 * The engines' load as the proxy knows it: read every `intervalMs` of simulated time (what
 * scraping /metrics at that interval sees), while anything else is still to happen. Undefined
 * when no plugin reads it.
 */
function sampledLoads(
  intervalMs: number,
  engines: ReadonlyMap<string, SimEngine>,
  clock: VirtualClock,
): Map<string, EngineLoad> | undefined {
  if (intervalMs <= 0) return undefined;
  const loads = new Map<string, EngineLoad>();
  const sample = () => {
    for (const [url, engine] of engines) loads.set(url, engine.load());
    // Only while something else is scheduled: otherwise the replay is over.
    if (clock.pending > 0) clock.after(intervalMs, sample);
  };
  clock.at(0, sample);
  return loads;
}

/** A cached block's KV event as a vLLM engine would publish it (whole trace blocks only). */
function kvEventOf(event: KvTreeEvent): KvEvent | undefined {
  const { node } = event;
  if (event.kind === 'removed') return { kind: 'removed', blocks: [node.handle], medium: 'GPU', group: 0 };
  if (node.tokens !== TRACE_BLOCK_TOKENS) return undefined;
  return {
    kind: 'stored',
    blocks: [node.handle],
    parent: node.parent?.handle,
    tokenIds: new Array<number>(TRACE_BLOCK_TOKENS).fill(node.id),
    blockSize: TRACE_BLOCK_TOKENS,
    lora: undefined,
    medium: 'GPU',
    group: 0,
  };
}

/**
 * A request's prompt as token ids: each block's tokens all its hash, so that two prompts
 * share exactly the blocks the trace says they share.
 */
function tokenIdsOf(request: TraceRequest): number[] {
  const ids = new Array<number>(request.inputTokens);
  for (let k = 0; k < request.blocks.length; k++) {
    const end = Math.min((k + 1) * TRACE_BLOCK_TOKENS, request.inputTokens);
    ids.fill(request.blocks[k] as number, k * TRACE_BLOCK_TOKENS, end);
  }
  return ids;
}

/** Characters per token of the prompt's text: what the router estimates tokens by (RoutingInput). */
const CHARS_PER_TOKEN = 4;

/**
 * A request's body as a client would send it to /v1/completions: its prompt's text written
 * only when a policy reads it (each block's text begins with its hash, so two prompts' texts
 * share exactly their shared blocks).
 */
function bodyOf(request: TraceRequest): Record<string, unknown> {
  let text: string | undefined;
  const body: Record<string, unknown> = { model: SIMULATED_MODEL, max_tokens: request.outputTokens };
  Object.defineProperty(body, 'prompt', {
    enumerable: true,
    get: () => {
      text ??= promptText(request);
      return text;
    },
  });
  return body;
}

function promptText(request: TraceRequest): string {
  const parts: string[] = [];
  for (let k = 0; k < request.blocks.length; k++) {
    const tokens = Math.min(TRACE_BLOCK_TOKENS, request.inputTokens - k * TRACE_BLOCK_TOKENS);
    const head = `${(request.blocks[k] as number).toString(36)}|`;
    parts.push(head.padEnd(tokens * CHARS_PER_TOKEN, '.'));
  }
  return parts.join('');
}
