import { Counter, Histogram, type Registry } from 'prom-client';
import type { FlowEvent } from '../../flow/events.js';
import { CountedHistogram } from './counted-histogram.js';

// Up to the longest default deadline (a prefill's 600 s): a long prompt's TTFT past 30 s must
// land in a bucket of its own, not only in +Inf.
/** @internal The latency histograms' buckets, in seconds. */
export const LATENCY_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600];
const TOKEN_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5];

/**
 * The proxy's own operational routes, which `disagg_requests_total` and the request duration
 * do not count: probes, scrapes and the admin API (whose changes are logged, each with its
 * `source`, and counted in `disagg_worker_changes_total`).
 */
const NOT_REQUESTS: ReadonlySet<string> = new Set(['health', 'ready', 'metrics', 'admin']);

/**
 * The metrics of requests and their latencies: answers by route and outcome, the flow's
 * phases (fed by its events), retries, migrations, tokens.
 *
 * @internal
 */
export class RequestMetrics {
  readonly #requests: Counter<'route' | 'status' | 'outcome' | 'leg'>;
  /** The flow's verdict on the request a response answers, until the response closes. */
  readonly #verdicts = new WeakMap<object, { outcome: string; leg: string | undefined }>();
  readonly #duration: Histogram<'route' | 'outcome'>;
  readonly #ttft: Histogram;
  readonly #prefill: Histogram;
  readonly #handoff: Histogram;
  readonly #interToken: CountedHistogram;
  readonly #held: Histogram;
  readonly #orphans: Counter;
  readonly #releases: Counter<'result'>;
  readonly #retries: Counter<'leg'>;
  readonly #migrations: Counter<'reason' | 'outcome'>;
  readonly #routed: Counter<'strategy' | 'reason'>;
  readonly #tokens: Counter<'route' | 'model' | 'kind'>;

  /** Registers them in `registers`. */
  constructor(registers: Registry[]) {
    this.#requests = new Counter({
      name: 'disagg_requests_total',
      help: 'Every answered request, by route, HTTP status, outcome (success, error, cancelled by the client, shutdown: ended past the grace period, rejected before any worker was called) and, for errors, the leg that failed',
      labelNames: ['route', 'status', 'outcome', 'leg'],
      registers,
    });
    this.#duration = new Histogram({
      name: 'disagg_request_duration_seconds',
      help: 'From a request arriving to its answer closing (the last byte, or the connection cut), by route and outcome',
      labelNames: ['route', 'outcome'],
      buckets: LATENCY_BUCKETS,
      registers,
    });
    this.#ttft = new Histogram({
      name: 'disagg_time_to_first_token_seconds',
      help: 'From the request reaching the router to its first token leaving it',
      buckets: LATENCY_BUCKETS,
      registers,
    });
    this.#prefill = new Histogram({
      name: 'disagg_prefill_duration_seconds',
      help: 'From the prefill dispatch to prefill completing',
      buckets: LATENCY_BUCKETS,
      registers,
    });
    this.#handoff = new Histogram({
      name: 'disagg_handoff_window_seconds',
      help: "From prefill's first output to decode taking the KV (the prefill worker holds it meanwhile)",
      buckets: LATENCY_BUCKETS,
      registers,
    });
    // Observed per token: a histogram without prom-client's per-call label handling.
    this.#interToken = new CountedHistogram(
      'disagg_inter_token_latency_seconds',
      'Between consecutive streamed chunks leaving the router',
      TOKEN_BUCKETS,
      registers,
    );
    this.#held = new Histogram({
      name: 'disagg_held_terminal_wait_seconds',
      help: "How long decode's last chunk waited for prefill to succeed",
      buckets: LATENCY_BUCKETS,
      registers,
    });
    this.#orphans = new Counter({
      name: 'disagg_orphaned_handoffs_total',
      help: 'Handoffs given up after the clean-up budget: KV left on a prefill worker',
      registers,
    });
    this.#releases = new Counter({
      name: 'disagg_kv_releases_total',
      help: 'Handoffs whose KV a prefill held although it finished the request at its first token, sent to a decode worker to be freed: freed (its handler answered), failed (the KV waits for the engine to free it)',
      labelNames: ['result'],
      registers,
    });
    this.#retries = new Counter({
      name: 'disagg_retries_total',
      help: 'Requests sent again to another worker after a worker failure before their first byte, by failing leg',
      labelNames: ['leg'],
      registers,
    });
    this.#migrations = new Counter({
      name: 'disagg_migrations_total',
      help: 'Decode streams that broke after their first token, by why (stream_error: a reset, an error event or a cut stream; idle: silence past the idle deadline; worker_down: its worker taken out of rotation while it streamed) and what became of them: migrated (continued on another worker), refused (not continued faithfully, or migration off for it; the log says why), failed (the continuation could not start)',
      labelNames: ['reason', 'outcome'],
      registers,
    });
    this.#routed = new Counter({
      name: 'disagg_routed_requests_total',
      help: 'Requests by how they were served (sequential, concurrent, early or aggregated) and, for aggregated ones, why',
      labelNames: ['strategy', 'reason'],
      registers,
    });
    this.#tokens = new Counter({
      name: 'disagg_tokens_total',
      help: "Tokens of answered requests as the workers' usage reported them, by route, model and kind: prompt, completion, cached (prompt tokens the prefill worker's cache held)",
      labelNames: ['route', 'model', 'kind'],
      registers,
    });
  }

  /**
   * The usage a worker reported for a request. Only usage a worker sent is counted, so the
   * model label holds names a worker served, not whatever a client wrote.
   */
  tokens(
    route: string,
    model: string,
    usage: { prompt_tokens?: number; completion_tokens?: number; prompt_tokens_details?: unknown },
  ): void {
    const cached = (usage.prompt_tokens_details as { cached_tokens?: unknown } | null | undefined)?.cached_tokens;
    for (const [kind, count] of [
      ['prompt', usage.prompt_tokens],
      ['completion', usage.completion_tokens],
      ['cached', cached],
    ] as const) {
      if (typeof count === 'number' && Number.isFinite(count) && count > 0)
        this.#tokens.inc({ route, model, kind }, count);
    }
  }

  /** An event listener that feeds the metrics of one request. */
  listener(): (event: FlowEvent) => void {
    let prefillDispatched: number | undefined;
    let firstOutput: number | undefined;
    return (event) => {
      switch (event.type) {
        case 'routed':
          this.#routed.inc({ strategy: event.strategy, reason: event.reason ?? '' });
          break;
        case 'prefillDispatched':
          prefillDispatched = event.elapsedMs;
          break;
        case 'prefillFirstOutput':
          firstOutput = event.elapsedMs;
          break;
        case 'prefillCompleted':
          if (prefillDispatched !== undefined) this.#prefill.observe((event.elapsedMs - prefillDispatched) / 1000);
          break;
        case 'kvClaimed':
          if (firstOutput !== undefined) this.#handoff.observe((event.elapsedMs - firstOutput) / 1000);
          break;
        case 'firstToken':
          this.#ttft.observe(event.elapsedMs / 1000);
          break;
        case 'terminalReleased':
          this.#held.observe(event.heldMs / 1000);
          break;
        case 'cleanupExpired':
          this.#orphans.inc();
          break;
        case 'handoffReleased':
          this.#releases.inc({ result: event.freed ? 'freed' : 'failed' });
          break;
      }
    };
  }

  /** What the flow concluded of the request `res` answers (its `finished` event). */
  verdict(res: object, outcome: string, leg: string | undefined): void {
    this.#verdicts.set(res, { outcome, leg });
  }

  /**
   * Counts one request once its response has closed (not `/health`, `/ready`, `/metrics`, `/admin/*`),
   * whatever answered it: the flow's verdict
   * where the request reached the flow; otherwise a 4xx is `rejected`, a 5xx an `error`, an
   * answer cut before its end `cancelled`.
   */
  answered(
    route: string,
    res: { statusCode: number; writableFinished: boolean },
    seconds?: number,
    how: { cutAtShutdown?: boolean } = {},
  ): void {
    // Health probes, scrapes and admin calls are not traffic: a kubelet's every 10 s would
    // outnumber a quiet fleet's requests and pull its error ratio toward zero, and an admin
    // call's few would show as quantiles of nothing (NaN) beside the model routes'.
    if (NOT_REQUESTS.has(route)) return;
    const verdict = this.#verdicts.get(res);
    const status = res.statusCode;
    // A request ended by shutdown past the grace period is neither the client's doing
    // (cancelled) nor a worker's (error): an operator sizing --grace-period-ms counts these.
    const outcome = how.cutAtShutdown
      ? 'shutdown'
      : (verdict?.outcome ??
        (!res.writableFinished ? 'cancelled' : status >= 500 ? 'error' : status >= 400 ? 'rejected' : 'success'));
    const leg = how.cutAtShutdown ? '' : (verdict?.leg ?? '');
    this.#requests.inc({ route, status: String(status), outcome, leg });
    if (seconds !== undefined) this.#duration.observe({ route, outcome }, seconds);
  }

  /** A request is tried again after its `leg` failed. */
  retried(leg: string): void {
    this.#retries.inc({ leg });
  }

  /** A decode stream broke after its first token: why, and whether it went on elsewhere. */
  migration(reason: string, outcome: string): void {
    this.#migrations.inc({ reason, outcome });
  }

  /** The gap between two chunks written to a client. */
  interToken(seconds: number): void {
    this.#interToken.observe(seconds);
  }
}
