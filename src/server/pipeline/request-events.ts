import type { FlowEvent, FlowEventOf } from '../../flow/events.js';
import type { WorkerPool } from '../../routing/worker-pool.js';
import { repeatedLogOf } from '../../runtime/repeated-log.js';
import { chargedWorker } from '../fleet/failure-rules.js';
import type { RequestTrace } from '../observability/tracing.js';
import type { ProxyDecodeWorker, ProxyPrefillWorker } from '../settings/worker-entries.js';
import type { LatencyFeed } from './latency-feed.js';
import type { ProxyState } from './proxy-state.js';

/** The flow's `routed` event, as the proxy's workers type it. */
export type Routed = FlowEventOf<'routed', ProxyPrefillWorker, ProxyDecodeWorker>;

/** What {@link requestEvents} keeps of one request, and the listener that feeds it. */
export type RequestEvents = ReturnType<typeof requestEvents>;

/**
 * The request's events (a request of `pool`, by its label, with a prompt of `tokens`): fed to the metrics and to the embedding application's tap (whose
 * errors are logged and ignored), and the two the handler reads (`routed`, `finished`) kept.
 * With a `latency` feed, to the latency predictor too (and `latency` kept, for the relay's gaps).
 */
export function requestEvents(proxy: ProxyState, pool?: string, tokens?: () => number, latency?: LatencyFeed) {
  const observe = proxy.metrics.listener(pool, tokens);
  const kvWork = kvWorkOf(proxy, () => seen.routed, tokens);
  const tap = proxy.options.onEvent;
  const seen: {
    routed: Routed | undefined;
    finished: FlowEventOf<'finished'> | undefined;
    trace: RequestTrace | undefined;
    /** What the request teaches the latency predictor, where a plugin reads it. */
    latency: LatencyFeed | undefined;
    /** Retries of this request so far, of both kinds (one budget). */
    retries: number;
    /** The decode workers whose stream broke and was continued elsewhere, in order. */
    brokeOn: ProxyDecodeWorker[];
    /**
     * Whether its KV is in the making or in transit: from its prefill's dispatch until decode
     * took the KV (or the prefill failed, or its handoff was released). Ending the request then
     * would end no prefill (nothing cancels one): it cannot be stopped at once.
     */
    handoffOpen: boolean;
    onEvent: (event: FlowEvent<ProxyPrefillWorker, ProxyDecodeWorker>) => void;
  } = {
    routed: undefined,
    finished: undefined,
    trace: undefined,
    latency,
    retries: 0,
    brokeOn: [],
    handoffOpen: false,
    onEvent: (event) => {
      observe(event);
      seen.trace?.onEvent(event);
      if (tap !== undefined) {
        try {
          tap(event);
        } catch (error) {
          proxy.logger.warn({ err: error }, 'The onEvent tap threw; ignored');
        }
      }
      // Rotation and circuits learn from every request's events (as watchHealth's do).
      proxy.health.observe(event);
      kvWork(event);
      latency?.observe(event);
      const wasOpen = seen.handoffOpen;
      seen.handoffOpen = handoffOpen(wasOpen, event);
      // Its KV taken by decode, the request can be stopped now: a waiter of higher priority may
      // take its slot (after this event's listeners, never inside them).
      if (wasOpen && !seen.handoffOpen) queueMicrotask(() => proxy.admission.recheck());
      if (event.type === 'routed') seen.routed = event;
      else if (event.type === 'decodeRetried') decodeRetried(proxy, seen, event);
      else if (event.type === 'prefillRetried') prefillRetried(proxy, seen, event);
      else if (event.type === 'migration') migrated(proxy, seen, event);
      else if (event.type === 'finished') seen.finished = event;
    },
  };
  return seen;
}

/** Whether a request's KV is in the making or in transit after `event` (see `handoffOpen`). */
function handoffOpen(open: boolean, event: FlowEvent<ProxyPrefillWorker, ProxyDecodeWorker>): boolean {
  switch (event.type) {
    case 'prefillDispatched':
      return true;
    case 'kvClaimed':
    case 'prefillFailed':
    case 'prefillRetried':
    case 'handoffReleased':
    case 'cleanupExpired':
      return false;
    default:
      return open;
  }
}

/**
 * Tells the KV follower which worker computed the request's prompt (so stored its blocks and
 * published them), dated when it was routed, since the engine publishes before it answers:
 * prefill's worker once prefill answered, the decode worker of an aggregated request once its
 * first token came. A request that failed computed nothing; a prompt shorter than one block
 * stores none, nor one whose every block the worker was expected to hold (a prompt repeated).
 */
function kvWorkOf(proxy: ProxyState, routed: () => Routed | undefined, tokens: (() => number) | undefined) {
  let routedAt = 0;
  let told = false;
  return (event: FlowEvent<ProxyPrefillWorker, ProxyDecodeWorker>): void => {
    if (event.type === 'routed') {
      routedAt = Date.now();
      told = false;
      return;
    }
    const route = routed();
    if (told || route === undefined) return;
    const aggregated = route.strategy === 'aggregated';
    const worker = aggregated
      ? event.type === 'firstToken'
        ? route.decodeWorker
        : undefined
      : event.type === 'prefillFirstOutput' || event.type === 'prefillCompleted' || event.type === 'handoff'
        ? route.prefillWorker
        : undefined;
    if (worker === undefined) return;
    told = true;
    if (tokens !== undefined) {
      const size = proxy.kv.index?.blockSize(worker) ?? 16;
      const whole = Math.floor(tokens() / size) * size;
      if (whole === 0) return;
      if (!aggregated && (route.predictedCachedTokens ?? 0) >= whole) return;
    }
    proxy.kv.sent(worker, routedAt);
  };
}

/**
 * The flow runs the request again from prefill: the worker of the leg that failed is charged
 * (a worker that could not be reached leaves the rotation), the retry counted and logged.
 */
function prefillRetried(
  proxy: ProxyState,
  seen: { retries: number },
  event: FlowEventOf<'prefillRetried', ProxyPrefillWorker, ProxyDecodeWorker>,
): void {
  const leg = event.leg ?? 'prefill';
  countFailure(proxy, event.error, { prefill: event.prefillWorker, decode: event.decodeWorker });
  proxy.metrics.retried(leg);
  const worker = leg === 'prefill' ? event.prefillWorker : event.decodeWorker;
  proxy.metrics.legRetried(leg, worker === undefined ? undefined : proxy.nameOf(worker));
  const message = `Retrying the request ${retryOn(retryTarget(proxy, leg, worker), leg)} (nothing was sent to the client yet)`;
  // While a worker is down every request may retry away from it: one line per worker and kind
  // of retry per interval, with a count (each request's own line still has its error).
  repeatedLogOf(proxy.logger).write(
    'warn',
    `${message} ${worker?.url ?? ''}`,
    {
      requestId: event.requestId,
      attempt: seen.retries,
      leg,
      ...named(proxy, worker),
      delayMs: Math.round(event.delayMs),
      err: event.error,
    },
    message,
  );
}

/** Where a retry goes, as its log line says it. */
function retryOn(target: RetryTarget, leg: 'prefill' | 'decode'): string {
  switch (target) {
    case 'another':
      return 'on another worker';
    case 'same':
      return `on the same worker: it is the only ${leg} worker in rotation`;
    case 'none':
      return `with no ${leg} worker in rotation`;
    case 'unknown':
      return 'from the start';
  }
}

/** Where a retry goes: another worker of the pool, the same one, none in rotation, or not known. */
type RetryTarget = 'another' | 'same' | 'none' | 'unknown';

/**
 * Where the retry of a request whose `leg` failed on `worker` will go, by its pool's rotation
 * now (the failed worker is passed over while another is in rotation): `unknown` for a worker
 * of no pool of the proxy's (a sidecar's prefill target) or none at all.
 */
function retryTarget(proxy: ProxyState, leg: 'prefill' | 'decode', worker: { url: string } | undefined): RetryTarget {
  if (worker === undefined) return 'unknown';
  const pool = proxy.pools
    .all()
    .map((each) => each[leg] as WorkerPool<{ url: string }>)
    .find((side) => side.has(worker));
  if (pool === undefined) return 'unknown';
  if (pool.available.some((other) => other !== worker)) return 'another';
  return pool.isAvailable(worker) ? 'same' : 'none';
}

/** How a log line names a worker: its name and its address (`url`); nothing without one. */
export function named(proxy: ProxyState, worker: { url: string } | undefined): { worker?: string; url?: string } {
  return worker === undefined ? {} : { worker: proxy.nameOf(worker), url: worker.url };
}

/**
 * The flow sends a failed sequential decode to another decode worker: the failed one is
 * charged, the retry counted and logged, and the request now names the new worker.
 */
function decodeRetried(
  proxy: ProxyState,
  seen: { routed: Routed | undefined },
  event: FlowEventOf<'decodeRetried', ProxyPrefillWorker, ProxyDecodeWorker>,
): void {
  const failed = event.fromWorker ?? seen.routed?.decodeWorker;
  countFailure(proxy, event.error, { decode: failed });
  proxy.metrics.retried('decode');
  proxy.metrics.legRetried('decode', failed === undefined ? undefined : proxy.nameOf(failed));
  const message =
    failed !== undefined && event.decodeWorker === failed
      ? 'Retrying decode on the same worker with the same handoff (it is the only decode worker in rotation): it was never reached, so the prefill worker still holds the KV (nothing was sent to the client yet)'
      : 'Retrying decode on another worker with the same handoff: the first was never reached, so the prefill worker still holds the KV (nothing was sent to the client yet)';
  repeatedLogOf(proxy.logger).write(
    'warn',
    `${message} ${failed?.url ?? ''}`,
    {
      requestId: event.requestId,
      attempt: event.attempt,
      leg: 'decode',
      ...named(proxy, failed),
      delayMs: Math.round(event.delayMs),
      err: event.error,
    },
    message,
  );
  if (seen.routed !== undefined && event.decodeWorker !== undefined) {
    seen.routed = { ...seen.routed, decodeWorker: event.decodeWorker };
  }
}

/**
 * A decode stream broke after its first token: counted by why and what became of it. One that
 * went on elsewhere is charged to the worker that broke (its leg counted `migrated`, its
 * failure by class; the client never sees that failure), and the request now names the
 * worker it went on with; one that did not is charged as the request's failure when it is
 * answered.
 */
function migrated(
  proxy: ProxyState,
  seen: { routed: Routed | undefined; brokeOn: ProxyDecodeWorker[] },
  event: FlowEventOf<'migration', ProxyPrefillWorker, ProxyDecodeWorker>,
): void {
  proxy.metrics.migration(event.reason, event.outcome);
  if (event.outcome !== 'migrated') return;
  countFailure(proxy, event.error, { decode: event.fromWorker });
  const broken = event.fromWorker ?? seen.routed?.decodeWorker;
  if (broken !== undefined) {
    seen.brokeOn.push(broken);
    proxy.metrics.legRetried('decode', proxy.nameOf(broken), 'migrated');
  }
  // Ended on the last worker (the budget all generated): the request stays with it.
  if (seen.routed !== undefined && event.toWorker !== undefined) {
    seen.routed = { ...seen.routed, decodeWorker: event.toWorker };
  }
}

/**
 * A failure the request met, counted once against the worker it is charged to, by the one
 * classifier (health learns of it from the same events: `HealthChecker.observe`).
 */
export function countFailure(
  proxy: ProxyState,
  error: unknown,
  workers: { prefill?: { url: string } | undefined; decode?: { url: string } | undefined },
): void {
  const charged = chargedWorker(error, workers);
  if (charged !== undefined) proxy.metrics.workerFailed(charged.role, proxy.nameOf(charged.worker), charged.kind);
}
