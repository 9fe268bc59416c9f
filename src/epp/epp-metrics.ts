import { Counter, Gauge, type Registry } from 'prom-client';
import type { Pick } from './endpoint-picker.js';

/**
 * The endpoint picker's own metrics, beside the proxy's (workers, in-flight per pod, tenants,
 * KV events): its decisions by result, the requests a gateway served on another pod than the
 * one picked, the ext_proc streams open and those refused past `--max-ext-proc-streams`, and
 * the request body bytes held (`bodyBytes`, read when scraped).
 *
 * @internal
 */
export class EppMetrics {
  readonly #picks: Counter<'result'>;
  readonly #servedElsewhere: Counter;
  readonly streams: Gauge;
  readonly streamsRefused: Counter;

  constructor(registers: Registry[], bodyBytes: () => number = () => 0) {
    this.#picks = new Counter({
      name: 'disagg_epp_picks_total',
      help: "The endpoint picker's decisions: disaggregated (a decode and a prefill pod), aggregated (a decode pod alone), or refused_<status> (answered by the picker: 400, 404, 429, 503, ...)",
      labelNames: ['result'],
      registers,
    });
    this.#servedElsewhere = new Counter({
      name: 'disagg_epp_served_elsewhere_total',
      help: 'Requests the gateway reports served on another pod than the one picked (it went down its fallback list); their in-flight count moved with them',
      registers,
    });
    this.streams = new Gauge({
      name: 'disagg_epp_streams',
      help: 'Envoy ext_proc streams open: requests between their headers and the end of their answer',
      registers,
    });
    this.streamsRefused = new Counter({
      name: 'disagg_epp_streams_refused_total',
      help: 'Envoy ext_proc streams refused at once (gRPC RESOURCE_EXHAUSTED) because --max-ext-proc-streams were open',
      registers,
    });
    new Gauge({
      name: 'disagg_epp_request_body_bytes',
      help: 'Request body bytes the endpoint picker holds for the streams still reading their body (each at most --max-body-bytes)',
      registers,
      collect() {
        this.set(bodyBytes());
      },
    });
  }

  picked(pick: Pick): void {
    this.#picks.inc({ result: pick.kind === 'routed' ? pick.strategy : `refused_${pick.status}` });
  }

  servedElsewhere(): void {
    this.#servedElsewhere.inc();
  }
}
