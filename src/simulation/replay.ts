// A trace replayed on a simulated fleet, on a virtual clock: each request routed when it
// arrives (by whatever decides, the project's own pipeline or a baseline), its prefill and
// decode legs run on the chosen engines, its KV sent between them, and what its user felt
// recorded: time to first token, the gaps between tokens, whether it met the service levels.

import { LatencyHistogram, type Percentiles, percentilesOf } from './latency-stats.js';
import type { EngineProfile } from './profile-types.js';
import type { SimEngine } from './sim-engine.js';
import type { TraceRequest } from './trace.js';
import type { VirtualClock } from './virtual-clock.js';

/** A routing decision's hold on one worker, released when its leg is over (as a pool's lease). */
export interface SimLease {
  /** The worker's address (its key in the fleet). */
  readonly worker: string;
  release(outcome?: 'success' | 'failure'): void;
}

/**
 * Which workers serve a request: its prefill and decode, or decode alone and why; or none, the
 * router refusing it before any worker (`refused`: shed for its service levels, over an
 * admission limit), with why.
 */
export type SimDecision =
  | { readonly strategy: 'disaggregated'; readonly prefill: SimLease; readonly decode: SimLease }
  | { readonly strategy: 'aggregated'; readonly reason: string; readonly decode: SimLease }
  | { readonly strategy: 'refused'; readonly reason: string };

/**
 * What the router may do to a request it routed, later: `preempt()` ends it as the proxy ends a
 * preempted request (its client's 503): its decode job aborted, a prefill under way left to
 * finish and its KV let go (nothing the router does cancels a prefill), its leases released
 * without an outcome. Before the request is served, or after it ended, nothing happens.
 */
export interface SimEnding {
  preempt(): void;
  /** Whether preempting it now would stop its work: its KV is not being computed or sent (nothing cancels a prefill). */
  readonly stoppable: boolean;
}

/** What the replay tells a router of a request it routed, in simulated ms (a router that learns from timings reads it). */
export type SimObservation =
  | { readonly type: 'firstToken'; readonly at: number; readonly ttftMs: number }
  /** Its KV reached its decode worker: it can be stopped now (see {@link SimEnding.stoppable}). */
  | { readonly type: 'handedOff'; readonly at: number }
  | {
      readonly type: 'finished';
      readonly at: number;
      readonly ttftMs: number;
      /** The mean gap between its tokens (0 for an answer of one token). */
      readonly itlMs: number;
      readonly tokens: number;
    };

/** What routes a replay's requests: asked once per request, when it arrives (it may answer later: a queue). */
export interface SimRouter {
  route(request: TraceRequest, index: number, ending: SimEnding): SimDecision | PromiseLike<SimDecision>;
  /** Told each served request's first token and its end, as they happen. */
  observe?(index: number, observation: SimObservation): void;
}

/** Service levels a request must meet to count in the goodput (a request's own, where it has them, win). */
export interface ServiceLevels {
  /** Time to first token, ms. */
  readonly ttftMs: number;
  /** Mean gap between tokens of one answer, ms. */
  readonly itlMs: number;
}

/** Options of {@link replay}. */
export interface ReplayOptions {
  readonly requests: readonly TraceRequest[];
  /** The fleet's engines by worker address: every worker a router names must be here. */
  readonly engines: ReadonlyMap<string, SimEngine>;
  readonly router: SimRouter;
  readonly slo: ServiceLevels;
  /** The clock the engines run on (a new one by default: theirs must be the same). */
  readonly clock: VirtualClock;
  /** Told how many requests have finished, now and then (a progress bar). */
  readonly progress?: ((finished: number, total: number) => void) | undefined;
}

/** What a replay measured. Times in ms, except where named. */
export interface ReplaySummary {
  readonly requests: number;
  readonly completed: number;
  /** Requests no engine could take: longer than the profile's context ({@link contextLimit}). */
  readonly rejected: number;
  /** Requests the router refused before any worker, by why (`slo`, `capacity`, ...). */
  readonly shed: Readonly<Record<string, number>>;
  /** Requests ended by the router while under way, for a request of higher priority (a 503). */
  readonly preempted: number;
  readonly ttft_ms: Percentiles;
  readonly itl_ms: Percentiles;
  /** Completed requests per simulated second that met both service levels. */
  readonly goodput_rps: number;
  /** The share (0-1) of all requests that completed within both service levels. */
  readonly slo_attainment: number;
  /** Completed requests per simulated second. */
  readonly throughput_rps: number;
  /** Tokens of answers per simulated second. */
  readonly output_tokens_per_s: number;
  /** The share of prompt tokens served from a cache (0-1). */
  readonly prefix_hit_rate: number;
  /** KV sent from prefill to decode workers, GB. */
  readonly kv_transfer_gb: number;
  /** How requests were served: `disaggregated`, or the reason for decode alone. */
  readonly decisions: Readonly<Record<string, number>>;
  readonly preemptions: number;
  /** From the first arrival to the last token, in simulated seconds. */
  readonly simulated_s: number;
  readonly slo: ServiceLevels;
  /** Each tenant's service apart, where the requests name tenants (those that name none under `default`). */
  readonly tenants?: Readonly<Record<string, TenantSummary>>;
}

/** One tenant's service in a replay (each request held to its own service levels, where it has them). */
export interface TenantSummary {
  readonly requests: number;
  readonly completed: number;
  /** Refused before any worker, for whatever reason. */
  readonly shed: number;
  readonly preempted: number;
  readonly slo_attainment: number;
  readonly goodput_rps: number;
  readonly ttft_ms: Percentiles;
}

/** A tenant's counts while replaying. */
interface TenantCounts {
  requests: number;
  completed: number;
  shed: number;
  preempted: number;
  good: number;
  readonly ttfts: number[];
}

/** One request's progress. */
interface Tracked {
  firstTokenAt: number | undefined;
  lastTokenAt: number;
  tokens: number;
  /** Where it is: routed but not yet served, served, ended. */
  phase: 'routing' | 'serving' | 'ended';
  /** Ends it as preempted, once it is being served. */
  preempt: (() => void) | undefined;
  /** Whether its KV is being computed or sent (dispatched to a prefill worker, not yet received by decode). */
  prefilling: boolean;
}

/**
 * Replays `requests` on the fleet: each routed at its arrival, served, measured. Resolves once
 * every request has finished (or none can go on).
 *
 * @throws {RangeError} when the router names a worker the fleet does not have.
 */
export async function replay(options: ReplayOptions): Promise<ReplaySummary> {
  const { requests, engines, router, slo, clock } = options;
  const arrived: number[] = [];
  for (let i = 0; i < requests.length; i++) {
    clock.at((requests[i] as TraceRequest).arrivalMs, () => arrived.push(i));
  }
  let start = Number.POSITIVE_INFINITY;
  for (const request of requests) start = Math.min(start, request.arrivalMs);
  if (requests.length === 0) start = 0;
  const ttfts: number[] = [];
  const gaps = new LatencyHistogram();
  const decisions: Record<string, number> = {};
  const tenants = new Map<string, TenantCounts>();
  const named = requests.some((request) => request.tenant !== undefined);
  const tenantOf = (request: TraceRequest): TenantCounts | undefined => {
    if (!named) return undefined;
    const name = request.tenant ?? 'default';
    let counts = tenants.get(name);
    if (counts === undefined) {
      counts = { requests: 0, completed: 0, shed: 0, preempted: 0, good: 0, ttfts: [] };
      tenants.set(name, counts);
    }
    return counts;
  };
  let completed = 0;
  let rejected = 0;
  let preempted = 0;
  const shed: Record<string, number> = {};
  let good = 0;
  let promptTokens = 0;
  let cachedTokens = 0;
  let outputTokens = 0;
  let lastAt = start;
  const engineOf = (worker: string): SimEngine => {
    const engine = engines.get(worker);
    if (engine === undefined) throw new RangeError(`The router chose ${worker}, which is not in the simulated fleet`);
    return engine;
  };
  const finished = () => {
    const done = completed + rejected + preempted + Object.values(shed).reduce((a, b) => a + b, 0);
    if (options.progress !== undefined && (done % 256 === 0 || done === requests.length)) {
      options.progress(done, requests.length);
    }
  };

  const serve = (request: TraceRequest, index: number, tracked: Tracked, decision: SimDecision): void => {
    const tenant = tenantOf(request);
    if (tenant !== undefined) tenant.requests++;
    if (decision.strategy === 'refused') {
      tracked.phase = 'ended';
      shed[decision.reason] = (shed[decision.reason] ?? 0) + 1;
      if (tenant !== undefined) tenant.shed++;
      finished();
      return;
    }
    const decode = engineOf(decision.decode.worker);
    if (request.inputTokens + request.outputTokens > contextLimit(decode.profile)) {
      // The engine refuses it (vLLM's 400 "maximum context length"): a failure, never served.
      rejected++;
      if (decision.strategy === 'disaggregated') decision.prefill.release('failure');
      decision.decode.release('failure');
      finished();
      return;
    }
    const reason = decision.strategy === 'disaggregated' ? 'disaggregated' : decision.reason;
    decisions[reason] = (decisions[reason] ?? 0) + 1;
    promptTokens += request.inputTokens;
    tracked.phase = 'serving';
    const listener = {
      token(at: number) {
        if (tracked.phase !== 'serving') return;
        if (tracked.firstTokenAt === undefined) {
          tracked.firstTokenAt = at;
          router.observe?.(index, { type: 'firstToken', at, ttftMs: at - request.arrivalMs });
        } else gaps.add(at - tracked.lastTokenAt);
        tracked.lastTokenAt = at;
        tracked.tokens++;
        outputTokens++;
      },
      done(at: number) {
        // A preempted request's job ends too (aborted): it was counted then.
        if (tracked.phase !== 'serving') return;
        tracked.phase = 'ended';
        decision.decode.release('success');
        completed++;
        lastAt = Math.max(lastAt, at);
        const ttft = (tracked.firstTokenAt ?? at) - request.arrivalMs;
        ttfts.push(ttft);
        const itl =
          tracked.tokens > 1 ? (tracked.lastTokenAt - (tracked.firstTokenAt as number)) / (tracked.tokens - 1) : 0;
        router.observe?.(index, { type: 'finished', at, ttftMs: ttft, itlMs: itl, tokens: tracked.tokens });
        const met = ttft <= (request.sloTtftMs ?? slo.ttftMs) && itl <= (request.sloItlMs ?? slo.itlMs);
        if (met) good++;
        if (tenant !== undefined) {
          tenant.completed++;
          tenant.ttfts.push(ttft);
          if (met) tenant.good++;
        }
        finished();
      },
    };
    const job = { blocks: request.blocks, inputTokens: request.inputTokens, outputTokens: request.outputTokens };
    let decodeJob: number | undefined;
    // The prefill worker's hold on the KV, let go when its decode is aborted (the proxy's handoff release).
    let letGo: (() => void) | undefined;
    const preempt = (at: number) => {
      tracked.phase = 'ended';
      preempted++;
      if (tenant !== undefined) tenant.preempted++;
      lastAt = Math.max(lastAt, at);
      // Released without an outcome: the worker did nothing wrong.
      if (decision.strategy === 'disaggregated') decision.prefill.release();
      decision.decode.release();
      if (decodeJob !== undefined) decode.cancel(decodeJob);
      letGo?.();
      finished();
    };
    tracked.preempt = () => preempt(options.clock.now);
    if (decision.strategy === 'aggregated') {
      decodeJob = decode.submit(
        { ...job, kind: 'whole' },
        { ...listener, admitted: (_at: number, cached: number) => (cachedTokens += cached) },
      );
      return;
    }
    const prefill = engineOf(decision.prefill.worker);
    tracked.prefilling = true;
    let prefillJob = -1;
    prefillJob = prefill.submit(
      { ...job, outputTokens: 0, kind: 'prefill' },
      {
        admitted: (_at, cached) => (cachedTokens += cached),
        prefilled: () => {
          // Preempted while its prompt was computed: no decode comes for the KV.
          if (tracked.phase !== 'serving') {
            prefill.released(prefillJob);
            return;
          }
          decision.prefill.release('success');
          letGo = () => prefill.released(prefillJob);
          decodeJob = decode.submit(
            { ...job, kind: 'decode' },
            {
              ...listener,
              received: (at: number) => {
                prefill.released(prefillJob);
                tracked.prefilling = false;
                if (tracked.phase === 'serving') router.observe?.(index, { type: 'handedOff', at });
              },
            },
          );
        },
      },
    );
  };

  // Routings that answer later (a request waiting in the router's queue) are served when they
  // do, on the clock's time then; the clock only stops once none is left waiting.
  let waiting = 0;
  const arrive = (index: number): void => {
    const request = requests[index] as TraceRequest;
    const tracked: Tracked = {
      firstTokenAt: undefined,
      lastTokenAt: 0,
      tokens: 0,
      phase: 'routing',
      preempt: undefined,
      prefilling: false,
    };
    const ending: SimEnding = {
      preempt: () => (tracked.phase === 'serving' ? tracked.preempt?.() : undefined),
      get stoppable() {
        return !tracked.prefilling;
      },
    };
    const routed = router.route(request, index, ending);
    if (!isThenable(routed)) {
      serve(request, index, tracked, routed);
      return;
    }
    waiting++;
    routed.then(
      (decision) => {
        waiting--;
        serve(request, index, tracked, decision);
      },
      (error: unknown) => {
        waiting--;
        failure ??= error;
      },
    );
  };
  let failure: unknown;
  for (;;) {
    while (clock.step()) {
      while (arrived.length > 0) arrive(arrived.shift() as number);
      // A routing waiting on a promise the last step settled (a slot freed) goes on now.
      if (waiting > 0) await settle();
      if (failure !== undefined) throw failure;
    }
    if (waiting === 0) break;
    await settle();
    if (failure !== undefined) throw failure;
    // Nothing on the clock and a routing still waiting: nothing will free it.
    if (clock.pending === 0 && waiting > 0 && arrived.length === 0) {
      throw new RangeError(`${waiting} requests still wait to be routed with nothing left to happen on the fleet`);
    }
  }
  let preemptions = 0;
  let receivedBytes = 0;
  for (const engine of engines.values()) {
    preemptions += engine.counters.preemptions;
    receivedBytes += engine.counters.receivedBytes;
  }
  const simulatedS = Math.max(lastAt - start, 0) / 1000;
  const perSecond = (count: number) => (simulatedS > 0 ? count / simulatedS : 0);
  return {
    requests: requests.length,
    completed,
    rejected,
    shed,
    preempted,
    ttft_ms: percentilesOf(ttfts),
    itl_ms: gaps.percentiles(),
    goodput_rps: perSecond(good),
    slo_attainment: requests.length === 0 ? 1 : good / requests.length,
    throughput_rps: perSecond(completed),
    output_tokens_per_s: perSecond(outputTokens),
    prefix_hit_rate: promptTokens === 0 ? 0 : cachedTokens / promptTokens,
    kv_transfer_gb: receivedBytes / 1e9,
    decisions,
    preemptions,
    simulated_s: simulatedS,
    slo,
    ...(named
      ? {
          tenants: Object.fromEntries(
            [...tenants].map(([name, counts]) => [
              name,
              {
                requests: counts.requests,
                completed: counts.completed,
                shed: counts.shed,
                preempted: counts.preempted,
                slo_attainment: counts.requests === 0 ? 1 : counts.good / counts.requests,
                goodput_rps: perSecond(counts.good),
                ttft_ms: percentilesOf(counts.ttfts),
              },
            ]),
          ),
        }
      : {}),
  };
}

/**
 * The longest request an engine of `profile` takes: its context, or less where its KV cache
 * holds less (vLLM refuses to start with a max_model_len its cache cannot hold; a request
 * longer than its cache could never run).
 */
export function contextLimit(profile: EngineProfile): number {
  return Math.min(profile.maxContextTokens, profile.kvCacheTokens);
}

/** Lets promises settled by the last step run their continuations (a macrotask: every microtask before it). */
function settle(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

function isThenable<T>(value: T | PromiseLike<T>): value is PromiseLike<T> {
  return typeof (value as { then?: unknown } | null)?.then === 'function';
}
