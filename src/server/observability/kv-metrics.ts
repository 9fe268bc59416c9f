import { Counter, Gauge, type Registry } from 'prom-client';
import type { KvEventSubscriber } from '../../kv/kv-subscriber.js';
import type { KvFollower } from '../fleet/kv-following.js';

/**
 * The KV event metrics, read from each followed worker's subscriber and the block index at a
 * scrape: events and batches applied, gaps in the sequence, replays by outcome, engine
 * restarts seen, the last batch's lag, blocks indexed, whether the view is trusted and how many
 * times it went blind.
 *
 * @internal
 */
export function registerKvMetrics(
  registers: Registry[],
  kv: KvFollower<{ url: string }>,
  nameOf: (worker: { url: string }) => string,
): void {
  const each = (visit: (worker: { url: string }, name: string) => void) => {
    for (const worker of kv.subscribers.keys()) visit(worker, nameOf(worker));
  };
  const cumulative = (name: string, help: string, read: (subscriber: KvEventSubscriber) => number) =>
    new Counter({
      name,
      help,
      labelNames: ['worker'],
      registers,
      collect() {
        this.reset();
        for (const [worker, subscriber] of kv.subscribers) this.inc({ worker: nameOf(worker) }, read(subscriber));
      },
    });
  cumulative('disagg_kv_events_total', "KV cache events applied from each worker's engine", (s) => s.stats.events);
  cumulative(
    'disagg_kv_event_batches_total',
    'KV event batches (engine steps) applied per worker',
    (s) => s.stats.batches,
  );
  cumulative(
    'disagg_kv_event_gaps_total',
    "Gaps in a worker's KV event sequence (messages lost on the way)",
    (s) => s.stats.gaps,
  );
  cumulative(
    'disagg_kv_engine_restarts_total',
    "Times a worker's KV event sequence went back (its engine restarted)",
    (s) => s.stats.restarts,
  );
  cumulative('disagg_kv_events_malformed_total', 'KV event messages that could not be read', (s) => s.stats.malformed);
  new Counter({
    name: 'disagg_kv_views_blind_total',
    help: "Times a worker's KV view went blind: no KV event within --kv-events-silence-ms of work sent to it",
    labelNames: ['worker'],
    registers,
    collect() {
      this.reset();
      each((worker, name) => this.inc({ worker: name }, kv.blindCount(worker) ?? 0));
    },
  });
  new Counter({
    name: 'disagg_kv_replays_total',
    help: "Replays asked of a worker's replay socket, by outcome",
    labelNames: ['worker', 'outcome'],
    registers,
    collect() {
      this.reset();
      for (const [worker, subscriber] of kv.subscribers) {
        this.inc({ worker: nameOf(worker), outcome: 'recovered' }, subscriber.stats.replays.recovered);
        this.inc({ worker: nameOf(worker), outcome: 'failed' }, subscriber.stats.replays.failed);
      }
    },
  });
  new Gauge({
    name: 'disagg_kv_event_lag_seconds',
    help: "How old a worker's last KV event batch was when it arrived (the engine's clock against the router's)",
    labelNames: ['worker'],
    registers,
    collect() {
      this.reset();
      for (const [worker, subscriber] of kv.subscribers) {
        if (subscriber.stats.lagMs !== undefined) this.set({ worker: nameOf(worker) }, subscriber.stats.lagMs / 1000);
      }
    },
  });
  new Gauge({
    name: 'disagg_kv_blocks',
    help: "KV blocks a worker holds, as its engine's events say (the router's index)",
    labelNames: ['worker'],
    registers,
    collect() {
      this.reset();
      each((worker, name) => this.set({ worker: name }, kv.index?.blocks(worker) ?? 0));
    },
  });
  new Gauge({
    name: 'disagg_kv_view_trusted',
    help: "Whether the router's view of a worker's KV cache is trusted (0 while lost events are replayed, and while blind: no event within --kv-events-silence-ms of work sent to it)",
    labelNames: ['worker'],
    registers,
    collect() {
      this.reset();
      each((worker, name) => this.set({ worker: name }, kv.index?.isTrusted(worker) === false ? 0 : 1));
    },
  });
}

/**
 * The KV prediction metrics: the cached tokens precise-prefix expected of each prefill worker
 * it routed to, beside those the worker reported (how true the index is).
 *
 * @internal
 */
export class KvPredictionMetrics {
  readonly #kvPredicted: Counter<'worker'>;
  readonly #kvReported: Counter<'worker'>;

  /** Registers them in `registers`. */
  constructor(registers: Registry[]) {
    this.#kvPredicted = new Counter({
      name: 'disagg_kv_predicted_cached_tokens_total',
      help: 'Prompt tokens precise-prefix expected each prefill worker to hold cached when it routed a request there',
      labelNames: ['worker'],
      registers,
    });
    this.#kvReported = new Counter({
      name: 'disagg_kv_reported_cached_tokens_total',
      help: 'Cached prompt tokens those prefill workers reported for the same requests (against the predicted: how true the index is)',
      labelNames: ['worker'],
      registers,
    });
  }

  /** A request precise-prefix routed: the cached tokens it expected of `worker`, and those the worker reported. */
  observe(worker: string, predicted: number, reported: number): void {
    this.#kvPredicted.inc({ worker }, predicted);
    this.#kvReported.inc({ worker }, reported);
  }
}
