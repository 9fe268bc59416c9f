import type { Logger } from '../runtime/logger.js';
import type { TracerLike } from '../server/observability/tracing.js';
import { branded, DisaggError } from '../util/disagg-error.js';

/** What `disagg serve --otlp-endpoint` exports with. */
export interface OtlpTracingOptions {
  /** The collector: a base URL (`http://otel-collector:4318`, to which `/v1/traces` is added) or the full traces URL. */
  endpoint: string;
  /** The share of new traces recorded, 0 to 1; a caller's `traceparent` decides for its own. */
  sampleRatio: number;
  /** The spans' `service.name`. */
  serviceName: string;
  /** Where export failures are told (at warn: a collector down must not flood the log). */
  logger: Logger;
}

/** A running exporter: the tracer to give the proxy, and its shutdown. */
export interface OtlpTracing {
  readonly tracer: TracerLike;
  /** The traces URL spans go to. */
  readonly url: string;
  /** Sends the spans still buffered, then stops; gives up after `timeoutMs` (5,000 by default) and never throws. */
  shutdown(timeoutMs?: number): Promise<void>;
}

/**
 * The OpenTelemetry packages `--otlp-endpoint` needs are not installed (they are optional
 * dependencies: `npm install --omit=optional` leaves them out). `code`: `DISAGG_TRACING_UNAVAILABLE`.
 */
export class TracingUnavailableError extends DisaggError {
  static override readonly is = branded<TracingUnavailableError>('TracingUnavailableError');
  declare readonly code: 'DISAGG_TRACING_UNAVAILABLE';

  constructor(cause: unknown) {
    super(
      'DISAGG_TRACING_UNAVAILABLE',
      '--otlp-endpoint needs the optional dependencies @opentelemetry/api, @opentelemetry/sdk-trace-base, @opentelemetry/exporter-trace-otlp-http and @opentelemetry/resources: install them, or drop --otlp-endpoint',
      { cause },
    );
  }
}

/**
 * The traces URL of an endpoint as OTLP/HTTP defines it for OTEL_EXPORTER_OTLP_ENDPOINT: a base
 * URL gets `/v1/traces`; a URL that already ends with it is kept.
 *
 * @example tracesUrl('http://collector:4318') // 'http://collector:4318/v1/traces'
 */
export function tracesUrl(endpoint: string): string {
  const url = new URL(endpoint);
  if (!url.pathname.endsWith('/v1/traces')) url.pathname = `${url.pathname.replace(/\/+$/, '')}/v1/traces`;
  return url.toString();
}

/**
 * One log line of an OpenTelemetry diagnostic: a failed export comes as an exception encoded
 * as JSON (its stack included, OpenTelemetry's `loggingErrorHandler`), told as one line naming
 * the collector and the error's message, its `code` a field; any other message as it came.
 *
 * @example
 * diagLine('{"message":"connect ECONNREFUSED 127.0.0.1:4318","code":"ECONNREFUSED","stack":"..."}', 'http://127.0.0.1:4318/v1/traces');
 * // { msg: 'OpenTelemetry could not export spans to http://127.0.0.1:4318/v1/traces: connect ECONNREFUSED 127.0.0.1:4318', fields: { url, code: 'ECONNREFUSED' } }
 */
export function diagLine(message: string, url: string): { msg: string; fields: { url: string; code?: string } } {
  const error = exceptionIn(message);
  if (error === undefined) return { msg: `OpenTelemetry: ${message}`, fields: { url } };
  return {
    msg: `OpenTelemetry could not export spans to ${url}: ${error.message}`,
    fields: typeof error.code === 'string' ? { url, code: error.code } : { url },
  };
}

/** The exception a diagnostic encodes as JSON (one with a string `message`), if it is one. */
function exceptionIn(message: string): { message: string; code?: unknown } | undefined {
  if (!message.startsWith('{')) return undefined;
  try {
    const parsed = JSON.parse(message) as { message?: unknown; code?: unknown } | null;
    return typeof parsed?.message === 'string' ? { message: parsed.message, code: parsed.code } : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Starts exporting spans over OTLP/HTTP (JSON) in batches: a tracer provider of its own (not
 * registered globally: an embedding application's tracing is left alone), sampling new traces
 * at `sampleRatio` and following a caller's sampled flag, its export failures logged at warn.
 * Throws {@link TracingUnavailableError} when the optional packages are missing.
 *
 * @example
 * const tracing = await startOtlpTracing({ endpoint: 'http://localhost:4318', sampleRatio: 1, serviceName: 'disagg', logger });
 * const proxy = createProxy({ ...options, tracer: tracing.tracer });
 * // ... on shutdown, after the proxy:
 * await tracing.shutdown();
 */
export async function startOtlpTracing(options: OtlpTracingOptions): Promise<OtlpTracing> {
  let modules: [
    typeof import('@opentelemetry/api'),
    typeof import('@opentelemetry/sdk-trace-base'),
    typeof import('@opentelemetry/exporter-trace-otlp-http'),
    typeof import('@opentelemetry/resources'),
  ];
  try {
    modules = await Promise.all([
      import('@opentelemetry/api'),
      import('@opentelemetry/sdk-trace-base'),
      import('@opentelemetry/exporter-trace-otlp-http'),
      import('@opentelemetry/resources'),
    ]);
  } catch (cause) {
    throw new TracingUnavailableError(cause);
  }
  const [api, sdk, otlp, resources] = modules;
  const { logger } = options;
  const url = tracesUrl(options.endpoint);
  // The exporter reports a failed export through OpenTelemetry's diagnostics only: without a
  // logger there, a collector that is down would go unnoticed.
  const warn = (message: string, ...args: unknown[]) => {
    const line = diagLine(message, url);
    logger.warn(args.length === 0 ? line.fields : { ...line.fields, args }, line.msg);
  };
  api.diag.setLogger({ error: warn, warn, info: () => {}, debug: () => {}, verbose: () => {} }, api.DiagLogLevel.WARN);
  const provider = new sdk.BasicTracerProvider({
    resource: resources.resourceFromAttributes({ 'service.name': options.serviceName }),
    sampler: new sdk.ParentBasedSampler({ root: new sdk.TraceIdRatioBasedSampler(options.sampleRatio) }),
    spanProcessors: [new sdk.BatchSpanProcessor(new otlp.OTLPTraceExporter({ url }))],
  });
  return {
    tracer: provider.getTracer('disagg'),
    url,
    async shutdown(timeoutMs = 5000) {
      let timer: NodeJS.Timeout | undefined;
      const late = new Promise<'late'>((resolve) => {
        timer = setTimeout(() => resolve('late'), timeoutMs);
      });
      try {
        const ended = await Promise.race([provider.shutdown().then(() => 'done' as const), late]);
        if (ended === 'late')
          logger.warn({ url, timeoutMs }, 'Spans still buffered were dropped: the collector did not take them in time');
      } catch (error) {
        logger.warn({ err: error, url }, 'Spans still buffered could not be sent');
      } finally {
        clearTimeout(timer);
      }
    },
  };
}
