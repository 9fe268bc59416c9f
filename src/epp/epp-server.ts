// `disagg epp`: the endpoint picker as a process. Envoy's ext_proc service on one port, gRPC
// health on another, the metrics on a third; the proxy's parts (pools, discovery, health
// probes, KV events, load, tenants, admission) underneath, without its HTTP API.
import { createServer, type Server as HttpServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { setTimeout as delay } from 'node:timers/promises';
import type * as GrpcJs from '@grpc/grpc-js';
import type * as HealthCheck from 'grpc-health-check';
import type { Stage } from '../server/pipeline/stage.js';
import { ProxyCore } from '../server/proxy-core.js';
import { readiness } from '../server/readiness.js';
import type { ProxyOptions } from '../server/settings/proxy-options.js';
import { resolveProxyOptions } from '../server/settings/resolve.js';
import { ConfigError } from '../server/settings/setting.js';
import { branded, DisaggError } from '../util/disagg-error.js';
import { EndpointPicker, type Pick } from './endpoint-picker.js';
import { EppMetrics } from './epp-metrics.js';
import EXT_PROC_DESCRIPTOR from './ext-proc-descriptor.json' with { type: 'json' };
import { ExtProcStream } from './ext-proc-stream.js';
import { EXT_PROC_SERVICE, LOADER_OPTIONS, type ProcessingRequest } from './ext-proc-wire.js';
import { defaultMaxExtProcStreams, StreamSlots } from './stream-slots.js';

/** The ports Envoy and Kubernetes expect (llm-d's charts). */
export const EPP_DEFAULTS = { port: 9002, healthPort: 9003, metricsPort: 9090 } as const;

/** The gRPC health services: Kubernetes' probes (`liveness`, `readiness`) and Envoy's cluster check (the ext_proc service); `''` is the server's. */
export const HEALTH_SERVICES = ['', 'liveness', 'readiness', EXT_PROC_SERVICE] as const;

/**
 * `disagg epp` asked for without its optional packages (`DISAGG_EPP_UNAVAILABLE`): what to
 * install, in one line.
 */
export class EppUnavailableError extends DisaggError {
  static override readonly is = branded<EppUnavailableError>('EppUnavailableError');
  declare readonly code: 'DISAGG_EPP_UNAVAILABLE';

  constructor(cause: unknown) {
    super(
      'DISAGG_EPP_UNAVAILABLE',
      'disagg epp needs @grpc/grpc-js, @grpc/proto-loader and grpc-health-check (optional dependencies): npm install @grpc/grpc-js @grpc/proto-loader grpc-health-check',
      { cause },
    );
  }
}

/** Why `disagg epp` refuses `--preempt`, in one line. */
const PREEMPT_REFUSED =
  "--preempt (preempt) is disagg serve's: an endpoint picker only picks the pods, and the requests it admits run between the gateway and the pods, where it cannot end them; drop it";

/** Where {@link startEndpointPicker} listens. */
export interface EppListen {
  /** The ext_proc service; 9002 by default (0: any free port). */
  port?: number | undefined;
  /** gRPC health; 9003 by default. */
  healthPort?: number | undefined;
  /** Prometheus `/metrics` over HTTP; 9090 by default. */
  metricsPort?: number | undefined;
  /** 0.0.0.0 by default: Envoy and the kubelet call from outside the pod. */
  host?: string | undefined;
}

/** A running endpoint picker. */
export interface EndpointPickerServer {
  /** The ports it listens on (the ones given, or those chosen for 0). */
  readonly ports: { extProc: number; health: number; metrics: number };
  /**
   * Adds a stage of your own to every API request the picker decides (see {@link Stage}), as
   * the proxy's `addStage`: the same stage runs alike in either host.
   *
   * @throws {TypeError} for a stage without a name or a `run` function, or a name taken.
   */
  addStage(stage: Stage): void;
  /** The proxy's parts it decides with (pools, membership, metrics). @internal */
  readonly core: ProxyCore;
  /**
   * Shuts down as a gateway expects: `readiness` and the ext_proc service report NOT_SERVING
   * at once (Envoy's health check and Kubernetes stop sending), picks go on for
   * `drainDelayMs`; then no new stream is taken, those under way get `gracePeriodMs` to end,
   * and the rest are cut (their leases given back). The options' values by default.
   */
  close(options?: { drainDelayMs?: number; gracePeriodMs?: number }): Promise<void>;
}

/**
 * Starts an endpoint picker for Envoy's ext_proc filter (the Gateway API Inference Extension's
 * protocol) over the proxy's options (`workers`, selectors, policies, KV events, tenants):
 * each request's decode pod in `x-gateway-destination-endpoint` and `envoy.lb` metadata, its
 * prefill pod in `x-prefiller-host-port` for the pod's sidecar (`disagg sidecar`, or llm-d's).
 *
 * @example
 * const epp = await startEndpointPicker({ connector: 'vllm', prefill: ['http://10.0.0.5:8000'], decode: ['http://10.0.0.7:8000'] });
 * process.on('SIGTERM', () => epp.close());
 *
 * @throws {ConfigError} for options that do not check (`preempt` among them, a proxy's alone); {EppUnavailableError} without the gRPC
 *   packages; a listen error (`EADDRINUSE`) for a port in use (nothing is left listening).
 */
export async function startEndpointPicker(
  options: ProxyOptions,
  listen: EppListen = {},
): Promise<EndpointPickerServer> {
  const resolved = resolveProxyOptions(options);
  // The picker holds a slot per request, but the request runs between Envoy and the pods: it
  // has no leg of its own to end, so a preemption would free a slot while the work went on.
  if (resolved.preempt) throw new ConfigError(PREEMPT_REFUSED);
  const { grpc, protoLoader, health } = await loadGrpc();
  const core = new ProxyCore(resolved);
  const picker = new EndpointPicker(core);
  const open = new Set<ExtProcStream>();
  const slots = new StreamSlots(resolved.maxExtProcStreams ?? defaultMaxExtProcStreams(resolved), core.logger);
  const metrics = new EppMetrics(core.metrics.registers, () => {
    let bytes = 0;
    for (const stream of open) bytes += stream.bodyBytes;
    return bytes;
  });
  const extProc = new grpc.Server();
  const definition = protoLoader.fromJSON(
    EXT_PROC_DESCRIPTOR as Parameters<typeof protoLoader.fromJSON>[0],
    LOADER_OPTIONS,
  );
  const loaded = grpc.loadPackageDefinition(definition) as unknown as {
    envoy: { service: { ext_proc: { v3: { ExternalProcessor: { service: GrpcJs.ServiceDefinition } } } } };
  };
  const host = {
    pick: (request: Parameters<EndpointPicker['pick']>[0]) => picker.pick(request),
    picked: (pick: Pick) => metrics.picked(pick),
    servedElsewhere: () => metrics.servedElsewhere(),
    maxBodyBytes: resolved.maxBodyBytes,
    logger: core.logger,
  };
  extProc.addService(loaded.envoy.service.ext_proc.v3.ExternalProcessor.service, {
    Process: (call: GrpcJs.ServerDuplexStream<ProcessingRequest, unknown>) => {
      // Past the cap: refused before any message is read, the streams open untouched.
      if (!slots.take()) {
        metrics.streamsRefused.inc();
        call.emit('error', { code: grpc.status.RESOURCE_EXHAUSTED, details: slots.refusal });
        return;
      }
      const stream = new ExtProcStream(host, (response) => {
        if (!call.destroyed && !call.writableEnded) call.write(response);
      });
      open.add(stream);
      metrics.streams.inc();
      // Once, however it ends: half-closed, cancelled (Envoy's RST_STREAM), broken, cut.
      const over = () => {
        stream.end();
        if (!open.delete(stream)) return;
        metrics.streams.dec();
        slots.give();
      };
      call.on('data', (message: ProcessingRequest) => stream.receive(message));
      call.on('end', () => {
        over();
        call.end();
      });
      // A cancelled or broken stream: the request under way ends with it.
      call.on('error', over);
      call.on('close', over);
    },
  });
  const healthServer = new grpc.Server();
  const healthService = new health.HealthImplementation(
    Object.fromEntries(HEALTH_SERVICES.map((name) => [name, 'NOT_SERVING'])),
  );
  healthService.addToServer(healthServer);
  // On the ext_proc port too: Envoy's cluster health check asks there, as llm-d's picker answers.
  healthService.addToServer(extProc);
  const report = () => {
    const ready = readiness(core).ready ? 'SERVING' : 'NOT_SERVING';
    healthService.setStatus('liveness', 'SERVING');
    for (const service of ['', 'readiness', EXT_PROC_SERVICE]) healthService.setStatus(service, ready);
  };
  const metricsServer = createServer((req, res) => core.answerMetricsPort(req, res));
  const bindHost = listen.host ?? '0.0.0.0';
  let ports: EndpointPickerServer['ports'];
  try {
    await core.start();
    ports = {
      extProc: await bind(grpc, extProc, bindHost, listen.port ?? EPP_DEFAULTS.port),
      health: await bind(grpc, healthServer, bindHost, listen.healthPort ?? EPP_DEFAULTS.healthPort),
      metrics: await listenHttp(metricsServer, bindHost, listen.metricsPort ?? EPP_DEFAULTS.metricsPort),
    };
  } catch (error) {
    extProc.forceShutdown();
    healthServer.forceShutdown();
    metricsServer.close();
    await core.shutdown({ accepting: () => false }, { drainDelayMs: 0, gracePeriodMs: 0 }).catch(() => {});
    throw error;
  }
  // Readiness follows the pools: each worker in or out of rotation, joining or leaving.
  const unwatch = core.pools.workerPools().map((pool) => pool.onChange(report));
  report();
  let closing: Promise<void> | undefined;
  return {
    ports,
    core,
    addStage: (stage) => core.addStage(stage),
    close(periods = {}) {
      closing ??= (async () => {
        const drainDelayMs = periods.drainDelayMs ?? resolved.drainDelayMs;
        const gracePeriodMs = periods.gracePeriodMs ?? resolved.gracePeriodMs;
        // Not ready at once (draining is set as the drain begins): Envoy's health check and
        // Kubernetes stop sending while the picks under way and new ones go on.
        const drained = core.beginDrain();
        report();
        await drained;
        if (drainDelayMs > 0) await delay(drainDelayMs);
        core.stopTaking();
        // No new stream; those under way have the grace period, then are cut (their leases go back).
        const ended = new Promise<void>((resolve) => extProc.tryShutdown(() => resolve()));
        const timer = new AbortController();
        await Promise.race([ended, delay(gracePeriodMs, undefined, { signal: timer.signal }).catch(() => {})]);
        timer.abort();
        extProc.forceShutdown();
        slots.flush();
        for (const stop of unwatch) stop();
        healthServer.forceShutdown();
        await core.finish(0);
        await new Promise<void>((resolve) => {
          metricsServer.close(() => resolve());
          metricsServer.closeAllConnections();
        });
      })();
      return closing;
    },
  };
}

/** Binds a gRPC server (plain HTTP/2: inside the cluster, as llm-d's EPP by default); resolves with its port. */
function bind(grpc: typeof GrpcJs, server: GrpcJs.Server, host: string, port: number): Promise<number> {
  return new Promise((resolve, reject) => {
    server.bindAsync(
      `${host.includes(':') ? `[${host}]` : host}:${port}`,
      grpc.ServerCredentials.createInsecure(),
      (error, bound) => (error === null ? resolve(bound) : reject(error)),
    );
  });
}

function listenHttp(server: HttpServer, host: string, port: number): Promise<number> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve((server.address() as AddressInfo).port);
    });
  });
}

/** The gRPC packages, from the user's node_modules (optional dependencies: a proxy does not carry them). */
async function loadGrpc(): Promise<{
  grpc: typeof GrpcJs;
  protoLoader: typeof import('@grpc/proto-loader');
  health: typeof HealthCheck;
}> {
  try {
    const [grpc, protoLoader, health] = await Promise.all([
      import('@grpc/grpc-js'),
      import('@grpc/proto-loader'),
      import('grpc-health-check'),
    ]);
    // CommonJS packages: their exports are the default's in some loaders.
    const unwrap = <T>(module: T): T => ((module as { default?: T }).default ?? module) as T;
    return { grpc: unwrap(grpc), protoLoader: unwrap(protoLoader), health: unwrap(health) };
  } catch (error) {
    throw new EppUnavailableError(error);
  }
}
