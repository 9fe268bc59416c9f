import type { KvSilenceWatch } from '../../kv/kv-silence.js';
import type { KvEventSubscriber } from '../../kv/kv-subscriber.js';
import type { EngineLoad } from '../../protocol/engines/load-metrics.js';
import type { WithAttributes, WorkerAttributes } from '../../routing/worker-attributes.js';
import type { WorkerPool, WorkerState } from '../../routing/worker-pool.js';
import type { PoolPair, Role } from './pool-set.js';

/** Who changed the membership: the start-up list, the admin API, or a discovery source. */
export type MembershipSource = 'config' | 'admin' | 'dns' | 'kubernetes';

/** Why a probe failed, as the log line and the admin API say it. */
export interface ProbeFailure {
  /** `GET /health answered 503`, or the error code (`ECONNREFUSED`, `TIMEOUT`). */
  reason: string;
  /** What an operator most likely got wrong, when the failure has a usual cause. */
  hint?: string | undefined;
}

/** A worker's circuit: its consecutive request failures, or, once opened, its trial. */
export interface Circuit {
  state: 'closed' | 'open' | 'half-open';
  failures: number;
  successes: number;
  timer: NodeJS.Timeout | undefined;
}

/** What membership knows of a worker: its name, where it is (or was), who put it there. */
export interface MemberFacts {
  readonly name: string;
  readonly role: Role;
  /** The pool it is (or was) in: its rotation and leases are read there, also once it has left. */
  readonly pool: PoolPair;
  readonly source: MembershipSource;
  /** Whether it left with requests still under way (its address stays redacted until they end). */
  leaving: boolean;
}

/**
 * Everything the proxy knows of one worker, one part per concern, each written by its owner
 * only:
 * - `member`: membership's (name, role, pool, source); undefined for a worker no membership
 *   registered (one `watchHealth` watches in a router's own pools);
 * - `probes` and `circuit`: health's (the run of probe results against the worker's state,
 *   why the last probe failed, the circuit breaker once a request failure made one);
 * - `load` and `scraping`: the engine-load scraper's (the last reading of its `/metrics`);
 * - `attributes`: what the worker says of itself (its entry's or its pod's labels, its
 *   well-known attributes), as the worker object carries them for routing;
 * - `kv`: the KV follower's (the subscriber to the worker's KV cache events, whose state the
 *   metrics show, and its view: the silence watch and whether it replays; what the worker
 *   holds is in the follower's block index, keyed by block).
 *
 * Its rotation and leases stay its pool's ({@link WorkerPool} is also a library class used
 * alone, and its pick on every request reads them): {@link stateOf} and {@link inFlightOf}
 * read them through the record's pool.
 */
export interface WorkerRecord<W = { url: string }> {
  readonly worker: W;
  readonly attributes: WorkerAttributes;
  member: MemberFacts | undefined;
  probes: { streak: number; lastFailure: ProbeFailure | undefined };
  circuit: Circuit | undefined;
  load: { reading: EngineLoad; at: number } | undefined;
  scraping: boolean;
  kv: KvFollowing | undefined;
}

/**
 * The KV follower's part of a record: the subscriber to the worker's events, the watch that
 * marks its view blind when work brings no event, and whether it is replaying.
 */
export interface KvFollowing {
  readonly subscriber: KvEventSubscriber;
  readonly watch: KvSilenceWatch;
  replaying: boolean;
}

/**
 * The fleet's book of workers: one {@link WorkerRecord} per worker the proxy has, or had
 * while requests it served still answer. Membership registers a worker when it joins and
 * forgets it once it has left and its last request ended; that one `forget` ends everything
 * known of it (an open circuit's timer included), so no part outlives the worker. Health and
 * the engine-load scraper write their parts into the same record; without membership (a
 * router's own pools under `watchHealth`, a unit test), a record is made on first use and
 * goes when its owners have cleared their parts ({@link release}).
 *
 * @internal
 */
export class WorkerRecords<W extends { url: string } = { url: string }> {
  readonly #records = new Map<W, WorkerRecord<W>>();

  /** `worker`'s record, if it has one. */
  get(worker: W): WorkerRecord<W> | undefined {
    return this.#records.get(worker);
  }

  /** `worker`'s record, made on first use. */
  of(worker: W): WorkerRecord<W> {
    let record = this.#records.get(worker);
    if (record === undefined) {
      record = {
        worker,
        attributes: (worker as WithAttributes).attributes ?? NO_ATTRIBUTES,
        member: undefined,
        probes: { streak: 0, lastFailure: undefined },
        circuit: undefined,
        load: undefined,
        scraping: false,
        kv: undefined,
      };
      this.#records.set(worker, record);
    }
    return record;
  }

  /** Every record, in the order the workers became known. */
  values(): IterableIterator<WorkerRecord<W>> {
    return this.#records.values();
  }

  /**
   * Drops `worker`'s record, stopping its circuit's timer; nothing for a worker without one.
   * A KV subscriber still open is the follower's to stop (it does when the pool's list
   * changes, which comes first): the record then keeps that part alone until it does.
   */
  forget(worker: W): void {
    const record = this.#records.get(worker);
    if (record === undefined) return;
    clearTimeout(record.circuit?.timer);
    if (record.kv === undefined) {
      this.#records.delete(worker);
      return;
    }
    Object.assign(record, {
      member: undefined,
      probes: { streak: 0, lastFailure: undefined },
      circuit: undefined,
      load: undefined,
    });
  }

  /**
   * Drops `worker`'s record once no part holds anything (what an owner calls after clearing
   * its part): a record kept by membership stays until membership forgets it.
   */
  release(worker: W): void {
    const record = this.#records.get(worker);
    if (record === undefined || !isEmpty(record)) return;
    this.#records.delete(worker);
  }

  /** Stops every circuit's timer (the proxy is shutting down); the records stay readable. */
  stopTimers(): void {
    for (const record of this.#records.values()) clearTimeout(record.circuit?.timer);
  }
}

/** A worker without attributes: one empty map for all. */
const NO_ATTRIBUTES: WorkerAttributes = Object.freeze({});

function isEmpty(record: WorkerRecord<unknown>): boolean {
  return (
    record.member === undefined &&
    record.circuit === undefined &&
    record.probes.streak === 0 &&
    record.probes.lastFailure === undefined &&
    record.load === undefined &&
    !record.scraping &&
    record.kv === undefined
  );
}

/** Where `record`'s worker stands in its pool: `left` once it is no longer listed there. */
export function stateOf(record: WorkerRecord<{ url: string }>): WorkerState | 'left' {
  const pool = record.member?.pool[record.member.role] as WorkerPool<unknown> | undefined;
  return pool?.stateOf(record.worker) ?? 'left';
}

/** How many leases of `record`'s worker its pool has out. */
export function inFlightOf(record: WorkerRecord<{ url: string }>): number {
  const pool = record.member?.pool[record.member.role] as WorkerPool<unknown> | undefined;
  return pool?.inFlight(record.worker) ?? 0;
}
