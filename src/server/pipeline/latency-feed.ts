import type { FlowEvent } from '../../flow/events.js';
import type { RoutingInput } from '../../routing/routing-input.js';
import type { LatencyFeatures, LatencyPredictor } from '../../routing/slo/latency-predictor.js';
import type { ModelPool } from '../fleet/pool-set.js';
import type { ProxyDecodeWorker, ProxyPrefillWorker } from '../settings/worker-entries.js';

type Worker = ProxyPrefillWorker | ProxyDecodeWorker;

/** What one request teaches the latency predictor, fed its events and its stream's gaps. */
export interface LatencyFeed {
  /** Each of the request's flow events, in order. */
  observe(event: FlowEvent<ProxyPrefillWorker, ProxyDecodeWorker>): void;
  /** The gap (in seconds) between two chunks written to the client, as the relay times it for the metrics. */
  gap(seconds: number): void;
}

/** A measurement waiting for its value: the worker and its features at dispatch. */
interface Pending {
  readonly worker: Worker;
  readonly features: LatencyFeatures;
}

/**
 * The feed of one request of `pool` (`input` its routing input) into `predictor`: at `routed`,
 * the features of the chosen workers, read then; at `firstToken`, a TTFT sample (from dispatch)
 * for the worker that computed the prompt (prefill's, or decode's when served on decode alone);
 * at a successful `finished`, the mean gap between the streamed chunks for the decode worker.
 * An attempt that is retried or migrates gives no sample of what it mixed (a TTFT with a retry's
 * wait, gaps from two workers). Undefined without a predictor or a pool: nothing to feed.
 *
 * @internal
 */
export function latencyFeed(
  predictor: LatencyPredictor<Worker> | undefined,
  pool: ModelPool | undefined,
  input: () => RoutingInput,
): LatencyFeed | undefined {
  if (predictor === undefined || pool === undefined) return undefined;
  let first: (Pending & { readonly dispatchedAt: number }) | undefined;
  let decode: Pending | undefined;
  let gaps = 0;
  let gapSeconds = 0;
  return {
    observe(event) {
      switch (event.type) {
        case 'routed': {
          const request = input();
          const { prefillWorker, decodeWorker } = event;
          // Read after the leases: the pool counts this request already (unless a worker of no pool, a sidecar's target).
          const onDecode =
            decodeWorker === undefined
              ? undefined
              : {
                  worker: decodeWorker,
                  features: predictor.features(decodeWorker, request, 'decode', pool.decode.load, {
                    counted: pool.decode.has(decodeWorker),
                  }),
                };
          const onPrefill =
            event.strategy === 'aggregated' || prefillWorker === undefined
              ? undefined
              : {
                  worker: prefillWorker,
                  features: predictor.features(prefillWorker, request, 'prefill', pool.prefill.load, {
                    counted: pool.prefill.has(prefillWorker),
                  }),
                };
          const computes = event.strategy === 'aggregated' ? onDecode : onPrefill;
          first = computes === undefined ? undefined : { ...computes, dispatchedAt: event.elapsedMs };
          decode = onDecode;
          gaps = 0;
          gapSeconds = 0;
          return;
        }
        case 'decodeRetried':
          first = undefined;
          decode = undefined;
          return;
        case 'migration':
          decode = undefined;
          return;
        case 'firstToken':
          if (first !== undefined)
            predictor.learnTtft(first.worker, first.features, event.elapsedMs - first.dispatchedAt);
          first = undefined;
          return;
        case 'finished':
          if (event.outcome === 'success' && decode !== undefined && gaps > 0) {
            predictor.learnItl(decode.worker, decode.features, (gapSeconds / gaps) * 1000);
          }
          decode = undefined;
          return;
      }
    },
    gap(seconds) {
      gaps++;
      gapSeconds += seconds;
    },
  };
}
