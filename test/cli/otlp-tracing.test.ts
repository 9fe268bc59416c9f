import { diag } from '@opentelemetry/api';
import { afterEach, describe, expect, it } from 'vitest';
import { diagLine, startOtlpTracing } from '../../src/cli/otlp-tracing.js';
import { recordingLogger } from '../support/async.js';

afterEach(() => diag.disable());

// What OpenTelemetry's loggingErrorHandler hands its diagnostics when an export fails at a
// collector that is down: the exception flattened to JSON, its stack included.
const refused = JSON.stringify({
  stack:
    'Error: connect ECONNREFUSED 127.0.0.1:1\n    at TCPConnectWrap.afterConnect [as oncomplete] (node:net:1611:16)',
  message: 'connect ECONNREFUSED 127.0.0.1:1',
  errno: '-111',
  code: 'ECONNREFUSED',
  syscall: 'connect',
  name: 'Error',
});

describe('the OTLP exporter in the log', () => {
  it('a collector that is down is one warn line naming the collector and the error, not a JSON-encoded stack', async () => {
    const { logger, records } = recordingLogger();
    const tracing = await startOtlpTracing({
      endpoint: 'http://127.0.0.1:1',
      sampleRatio: 1,
      serviceName: 't',
      logger,
    });
    diag.error(refused);
    expect(records).toEqual([
      {
        level: 'warn',
        fields: { url: 'http://127.0.0.1:1/v1/traces', code: 'ECONNREFUSED' },
        message:
          'OpenTelemetry could not export spans to http://127.0.0.1:1/v1/traces: connect ECONNREFUSED 127.0.0.1:1',
      },
    ]);
    await tracing.shutdown(1000);
  });

  it('any other diagnostic is told as it came, with the collector', () => {
    expect(diagLine('Dropped 3 spans: the queue is full', 'http://c/v1/traces')).toEqual({
      msg: 'OpenTelemetry: Dropped 3 spans: the queue is full',
      fields: { url: 'http://c/v1/traces' },
    });
    expect(diagLine('{not json', 'http://c/v1/traces').msg).toBe('OpenTelemetry: {not json');
  });
});
