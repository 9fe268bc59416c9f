// disagg serve's own output: its logs and the OTLP export of its spans.

import { httpUrl, oneOf, text, unitRatio } from './parsers.js';
import { inGroup } from './setting.js';

const PINO_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;

/** The settings of `--help`'s Logs and traces group. */
export const LOG_ROWS = inGroup('Logs and traces', [
  {
    key: 'logFormat',
    flag: 'log-format',
    arg: 'json|pretty',
    help: 'JSON lines, or pretty lines for a terminal (needs the optional pino-pretty)',
    default: 'json',
    serveOnly: true,
    parse: oneOf(['json', 'pretty']),
  },
  {
    key: 'logLevel',
    flag: 'log-level',
    arg: 'LEVEL',
    help: `pino level (${PINO_LEVELS.join(', ')})`,
    default: 'info',
    serveOnly: true,
    parse: oneOf(PINO_LEVELS),
  },
  {
    key: 'tracing.otlpEndpoint',
    flag: 'otlp-endpoint',
    arg: 'URL',
    help: "export the proxy's spans over OTLP/HTTP to this collector (http://otel-collector:4318; /v1/traces is added unless given); needs the optional OpenTelemetry packages; OTEL_EXPORTER_OTLP_HEADERS is honoured",
    shownDefault: 'off',
    serveOnly: true,
    parse: httpUrl,
  },
  {
    key: 'tracing.sampleRatio',
    flag: 'trace-sample-ratio',
    arg: 'R',
    help: "the share of new traces recorded (0 to 1); a request that arrives with a traceparent follows its caller's decision",
    default: 1,
    serveOnly: true,
    parse: unitRatio,
  },
  {
    key: 'tracing.serviceName',
    flag: 'trace-service-name',
    arg: 'NAME',
    help: 'the service.name of the exported spans',
    default: 'disagg',
    serveOnly: true,
    parse: text,
  },
]);
