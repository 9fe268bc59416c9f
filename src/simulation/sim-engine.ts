// A simulated inference engine: the scheduler loop of vLLM or SGLang over a KV cache of
// blocks, its steps taking the time its profile measured. It keeps the queues an operator
// reads in /metrics (waiting, running, KV usage), publishes the KV events a precise router
// follows, and tells each job's owner when its prompt is computed and each token produced.
//
// The loop, per step, as vLLM's V1 scheduler (vllm/v1/core/sched/scheduler.py) does it:
// running requests first (each decoding one token, or computing its next prompt chunk within
// the step's token budget), then waiting ones while the budget, the running limit and the KV
// blocks allow; out of blocks, the newest running request is preempted (its blocks freed, its
// prompt and answer so far recomputed later, first in line). SGLang's (scheduler.py) differs
// in two ways kept here: a step is either a prefill batch or a decode batch, prefill first;
// and out of blocks it retracts the decoding request with the fewest tokens of answer.

import type { EngineLoad } from '../protocol/engines/load-metrics.js';
import { KvTree, type KvTreeEvent } from './kv-tree.js';
import { cpuLoadMs, decodeStepMs, prefillMs, transferMs } from './profile-timing.js';
import type { EngineProfile } from './profile-types.js';
import type { Job, JobListener, JobRequest } from './sim-job.js';
import { TRACE_BLOCK_TOKENS } from './trace.js';
import type { SimClock } from './virtual-clock.js';

/** Options of {@link SimEngine}. */
export interface SimEngineOptions {
  readonly profile: EngineProfile;
  /** Its time: a virtual clock in a replay, real timers live. */
  readonly clock: SimClock;
  /** Told of each block stored on, or dropped from, its GPU (what its KV events say). */
  readonly onKvEvent?: ((event: KvTreeEvent) => void) | undefined;
}

/** What an engine did, for a replay's summary. */
export interface EngineCounters {
  steps: number;
  /** Virtual ms it spent in steps. */
  busyMs: number;
  preemptions: number;
  /** Prompt tokens it computed (cached ones not counted). */
  computedTokens: number;
  /** Tokens of answers it produced. */
  decodedTokens: number;
  /** KV bytes it received from prefill workers. */
  receivedBytes: number;
}

/** One computed stretch of a prompt in a step. */
interface Chunk {
  readonly job: Job;
  readonly tokens: number;
}

/**
 * A simulated vLLM- or SGLang-shaped engine on a virtual clock ({@link EngineProfile.engine}
 * picks the scheduler's shape). Jobs come in through {@link submit}; it steps while it has
 * work and stands idle otherwise.
 *
 * @example
 * const engine = new SimEngine({ profile, clock });
 * engine.submit({ blocks: [1, 2], inputTokens: 1000, outputTokens: 10, kind: 'whole' }, { done: (at) => {} });
 * clock.run();
 */
export class SimEngine {
  readonly profile: EngineProfile;
  readonly kv: KvTree;
  readonly counters: EngineCounters = {
    steps: 0,
    busyMs: 0,
    preemptions: 0,
    computedTokens: 0,
    decodedTokens: 0,
    receivedBytes: 0,
  };
  readonly #clock: SimClock;
  readonly #waiting: Job[] = [];
  /** Decode jobs whose KV is on its way or received, waiting for a place among the running. */
  readonly #arriving: Job[] = [];
  readonly #running: Job[] = [];
  /** Computed prefills whose KV is held until the decode side has it. */
  readonly #holding = new Map<number, Job>();
  #stepping = false;
  #linkFreeAt = 0;
  #serial = 0;
  readonly #mixed: boolean;

  constructor(options: SimEngineOptions) {
    this.profile = options.profile;
    this.#clock = options.clock;
    this.#mixed = options.profile.engine === 'vllm';
    this.kv = new KvTree({
      gpuUnits: Math.floor(options.profile.kvCacheTokens / options.profile.blockTokens),
      blockTokens: options.profile.blockTokens,
      cpuTokens: options.profile.cpuCacheTokens,
      onEvent: options.onKvEvent,
    });
  }

  /** Its load as its /metrics says it: requests waiting (KV transfers included), running, KV usage. */
  load(): EngineLoad {
    return {
      waiting: this.#waiting.length + this.#arriving.length,
      running: this.#running.length,
      kvUsage: this.kv.capacity === 0 ? 0 : this.kv.used / this.kv.capacity,
    };
  }

  /** Jobs on it (waiting, receiving, running or holding their KV for a transfer). */
  get jobs(): number {
    return this.#waiting.length + this.#arriving.length + this.#running.length + this.#holding.size;
  }

  /**
   * Takes a job: `prefill` and `whole` wait to be computed; `decode` waits for blocks to
   * receive its KV into, which then comes over the link at the profile's bandwidth (what its
   * cache already holds of the prompt is not sent). Returns the job's id.
   */
  submit(request: JobRequest, listener: JobListener = {}): number {
    const job: Job = {
      id: this.#serial++,
      request,
      listener,
      phase: 'waiting',
      nodes: [],
      computed: 0,
      target: request.inputTokens,
      generated: 0,
      privateUnits: 0,
      cachedAtAdmission: undefined,
      preemptions: 0,
      cancelled: false,
    };
    if (request.kind === 'decode') {
      this.#arriving.push(job);
      this.#receive();
    } else {
      this.#waiting.push(job);
    }
    this.#kick();
    return job.id;
  }

  /**
   * A `prefill` job's KV is no longer needed (the decode side received it, or the request
   * ended): its blocks are released to the cache.
   */
  released(id: number): void {
    const job = this.#holding.get(id);
    if (job === undefined) return;
    this.#holding.delete(id);
    this.#finish(job);
    this.#receive();
    this.#kick();
  }

  /**
   * Ends a job its caller left, as an engine aborts a request whose connection closed: out of
   * its queue, its blocks given back, its listener told `done`. A job receiving its KV ends once
   * the transfer lands (the link is busy until then); a computed prefill lets its KV go. Nothing
   * for a job already done.
   */
  cancel(id: number): void {
    if (this.#holding.has(id)) {
      this.released(id);
      return;
    }
    for (const queue of [this.#waiting, this.#arriving, this.#running]) {
      const at = queue.findIndex((job) => job.id === id);
      if (at === -1) continue;
      const job = queue[at] as Job;
      if (job.phase === 'transferring') {
        job.cancelled = true;
        return;
      }
      queue.splice(at, 1);
      this.#finish(job);
      this.#receive();
      this.#kick();
      return;
    }
  }

  /** Starts receiving the KV of the decode jobs first in line, while blocks can be had for them. */
  #receive(): void {
    for (const job of this.#arriving) {
      if (job.phase !== 'waiting') continue;
      const { blocks, inputTokens } = job.request;
      const match = this.kv.match(blocks);
      if (!this.kv.hold(match.nodes, this.#clock.now)) return;
      const local = match.gpuTokens + match.cpuTokens;
      const units = this.kv.unitsOf(inputTokens) - this.kv.unitsOf(local);
      if (!this.kv.allocate(units)) {
        this.kv.release(match.nodes, this.#clock.now);
        return; // first in line waits for room, as vLLM's waiting queue does
      }
      job.nodes = [...match.nodes];
      job.privateUnits = units;
      job.phase = 'transferring';
      job.cachedAtAdmission = local;
      job.listener.admitted?.(this.#clock.now, local);
      const sent = inputTokens - local;
      this.counters.receivedBytes += sent * this.profile.kvBytesPerToken;
      // One link per worker: transfers queue on it (NIXL reads share the NIC).
      const start = Math.max(this.#clock.now, this.#linkFreeAt);
      const end = start + transferMs(this.profile, sent) + cpuLoadMs(this.profile, match.cpuTokens);
      this.#linkFreeAt = end;
      this.#clock.at(end, () => {
        if (job.cancelled) {
          this.#arriving.splice(this.#arriving.indexOf(job), 1);
          this.#finish(job);
          this.#receive();
          this.#kick();
          return;
        }
        job.computed = inputTokens;
        job.target = inputTokens;
        this.#cacheComputed(job);
        job.phase = 'ready';
        job.listener.received?.(this.#clock.now);
        this.#kick();
      });
    }
  }

  /**
   * Starts a step now unless one is under way or there is nothing to do: vLLM's a mixed batch;
   * SGLang's a prefill batch when one can be formed, else a decode batch.
   */
  #kick(): void {
    if (this.#stepping) return;
    let plan = this.#plan(this.#mixed ? 'mixed' : 'prefill');
    if (plan.chunks.length === 0 && plan.decodes.length === 0 && !this.#mixed) plan = this.#plan('decode');
    const { chunks, decodes } = plan;
    if (chunks.length === 0 && decodes.length === 0) return;
    let stepMs = plan.loadMs;
    for (const { job, tokens } of chunks) stepMs += prefillMs(this.profile, job.computed, tokens);
    if (decodes.length > 0) {
      let context = 0;
      for (const job of decodes) context += job.computed;
      stepMs += decodeStepMs(this.profile, decodes.length, context / decodes.length);
    } else {
      // A forward pass reads every weight however few tokens it computes: a short chunk after
      // a long cached prefix costs no less than a decode step of its sequences would.
      let context = 0;
      for (const { job, tokens } of chunks) context += job.computed + tokens;
      stepMs = Math.max(stepMs, decodeStepMs(this.profile, chunks.length, context / chunks.length));
    }
    this.#stepping = true;
    this.counters.steps++;
    this.counters.busyMs += stepMs;
    this.#clock.after(stepMs, () => this.#endStep(chunks, decodes));
  }

  /** One step's batch: what it computes, each job's blocks for it allocated. */
  #plan(mode: 'mixed' | 'prefill' | 'decode'): { chunks: Chunk[]; decodes: Job[]; loadMs: number } {
    const chunks: Chunk[] = [];
    const decodes: Job[] = [];
    let loadMs = 0;
    let budget = this.profile.maxBatchTokens;
    let preempted = false;
    // Received decode jobs take their place among the running first (their KV is in).
    if (mode !== 'prefill') {
      while (this.#arriving[0]?.phase === 'ready' && this.#running.length < this.profile.maxRunning) {
        const job = this.#arriving.shift() as Job;
        job.phase = 'running';
        this.#running.push(job);
      }
    }
    // The running, in order: one token each for those decoding, the next chunk of a prompt.
    for (let i = 0; i < this.#running.length && budget > 0; i++) {
      const job = this.#running[i] as Job;
      const decoding = job.computed >= job.target;
      if ((decoding && mode === 'prefill') || (!decoding && mode === 'decode')) continue;
      const tokens = decoding ? 1 : Math.min(job.target - job.computed, budget);
      const units = this.kv.unitsOf(job.computed + tokens) - this.kv.unitsOf(job.computed);
      let fits = this.kv.allocate(units);
      while (!fits) {
        const at = this.#preemptOne();
        preempted = true;
        if (at === undefined || at === i) break;
        if (at < i) i--;
        fits = this.kv.allocate(units);
      }
      // The job itself preempted, or none left to preempt: the running stop here (vLLM).
      if (!fits) break;
      job.privateUnits += units;
      if (decoding) decodes.push(job);
      else chunks.push({ job, tokens });
      budget -= tokens;
    }
    // Then the waiting, unless this step preempted (vLLM admits none then).
    if (!preempted && mode !== 'decode') {
      while (this.#waiting.length > 0 && this.#running.length < this.profile.maxRunning && budget > 0) {
        const job = this.#waiting[0] as Job;
        const admitted = this.#admit(job, budget);
        if (admitted === undefined) break;
        this.#waiting.shift();
        job.phase = 'running';
        this.#running.push(job);
        chunks.push({ job, tokens: admitted.tokens });
        loadMs += admitted.loadMs;
        budget -= admitted.tokens;
      }
    }
    return { chunks, decodes, loadMs };
  }

  /**
   * A waiting job's first chunk, if it can start: its cached prefix held (offloaded blocks
   * brought back, at the PCIe bandwidth), blocks for the chunk allocated. Undefined when the
   * blocks cannot be had (it stays first in line).
   */
  #admit(job: Job, budget: number): { tokens: number; loadMs: number } | undefined {
    const { blocks } = job.request;
    const match = this.kv.match(blocks);
    if (!this.kv.hold(match.nodes, this.#clock.now)) return undefined;
    // A whole prompt found cached still computes its last token, for its logits (vLLM).
    const cached = Math.min(match.gpuTokens + match.cpuTokens, job.target - 1);
    const tokens = Math.min(job.target - cached, budget);
    const units = this.kv.unitsOf(cached + tokens) - this.kv.unitsOf(cached);
    if (!this.kv.allocate(units)) {
      this.kv.release(match.nodes, this.#clock.now);
      return undefined;
    }
    job.nodes = [...match.nodes];
    job.computed = cached;
    job.privateUnits = units;
    if (job.cachedAtAdmission === undefined) {
      job.cachedAtAdmission = cached;
      job.listener.admitted?.(this.#clock.now, cached);
    }
    return { tokens, loadMs: cpuLoadMs(this.profile, match.cpuTokens) };
  }

  /**
   * Frees blocks by preempting a running job: vLLM's newest; SGLang's decoding job with the
   * fewest tokens of answer (then the longest prompt). Its blocks are freed and it goes back
   * first in line, to compute its prompt and its answer so far again. Returns the index it
   * had among the running, or undefined when none is left.
   */
  #preemptOne(): number | undefined {
    let at: number | undefined;
    if (this.#mixed) {
      at = this.#running.length === 0 ? undefined : this.#running.length - 1;
    } else {
      for (let i = 0; i < this.#running.length; i++) {
        const job = this.#running[i] as Job;
        const best = at === undefined ? undefined : (this.#running[at] as Job);
        if (
          best === undefined ||
          job.generated < best.generated ||
          (job.generated === best.generated && job.request.inputTokens > best.request.inputTokens)
        )
          at = i;
      }
    }
    if (at === undefined) return undefined;
    const [victim] = this.#running.splice(at, 1) as [Job];
    this.#dropBlocks(victim);
    victim.phase = 'waiting';
    victim.computed = 0;
    victim.target = victim.request.inputTokens + victim.generated;
    victim.preemptions++;
    this.counters.preemptions++;
    this.#waiting.unshift(victim);
    return at;
  }

  /** Gives a job's blocks back: its cached prompt blocks released, its own freed. */
  #dropBlocks(job: Job): void {
    this.kv.release(job.nodes, this.#clock.now);
    this.kv.free(job.privateUnits);
    job.nodes = [];
    job.privateUnits = 0;
  }

  #endStep(chunks: readonly Chunk[], decodes: readonly Job[]): void {
    const now = this.#clock.now;
    this.#stepping = false;
    for (const { job, tokens } of chunks) {
      if (job.phase !== 'running') continue;
      job.computed += tokens;
      this.counters.computedTokens += tokens;
      this.#cacheComputed(job);
      if (job.computed < job.target) continue;
      if (job.request.kind === 'prefill') {
        this.#running.splice(this.#running.indexOf(job), 1);
        job.phase = 'holding';
        this.#holding.set(job.id, job);
        job.listener.prefilled?.(now);
        continue;
      }
      // The step that computes a prompt samples the answer's next token.
      this.#emit(job, now);
    }
    for (const job of decodes) {
      if (job.phase !== 'running') continue;
      job.computed++;
      this.#emit(job, now);
    }
    this.#receive();
    this.#kick();
  }

  /** One token of `job`'s answer; the job ends with its last. */
  #emit(job: Job, now: number): void {
    const index = job.generated++;
    this.counters.decodedTokens++;
    job.listener.token?.(now, index);
    if (job.generated >= job.request.outputTokens) {
      this.#running.splice(this.#running.indexOf(job), 1);
      this.#finish(job);
    }
  }

  #finish(job: Job): void {
    this.#dropBlocks(job);
    job.phase = 'done';
    job.listener.done?.(this.#clock.now);
  }

  /** Puts the prompt blocks `job` has computed in the cache (their blocks moved from its own). */
  #cacheComputed(job: Job): void {
    const { blocks, inputTokens } = job.request;
    for (let k = job.nodes.length; k < blocks.length; k++) {
      const end = Math.min((k + 1) * TRACE_BLOCK_TOKENS, inputTokens);
      if (job.computed < end) return;
      const tokens = end - k * TRACE_BLOCK_TOKENS;
      const units = this.kv.unitsOf(tokens);
      this.kv.free(units);
      job.privateUnits -= units;
      job.nodes.push(this.kv.insert(job.nodes[k - 1], blocks[k] as number, tokens, this.#clock.now));
    }
  }
}
