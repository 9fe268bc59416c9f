import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { loadServeConfig } from '../src/server/config.js';
import { SETTINGS } from '../src/server/options.js';

const path = fileURLToPath(new URL('../disagg.example.yaml', import.meta.url));

/** The value at a dotted key of the file (`routing.cacheThreshold`). */
function at(values: Record<string, unknown>, key: string): unknown {
  return key.split('.').reduce<unknown>((node, part) => (node as Record<string, unknown> | undefined)?.[part], values);
}

describe('disagg.example.yaml', () => {
  it('is a configuration disagg serve accepts', () => {
    const config = loadServeConfig(['--config', path], {});
    expect(config).toMatchObject({
      connector: 'vllm',
      prefill: [{ url: 'http://prefill-0:8100', name: 'prefill-0' }, { url: 'http://prefill-1:8100' }],
      decode: [{ url: 'http://decode-0:8200' }],
      prefillPolicy: 'cache-aware',
    });
  });

  it('names every setting (the keys only in the environment commented out), each at its default', () => {
    const values = parse(readFileSync(path, 'utf8')) as Record<string, unknown>;
    const text = readFileSync(path, 'utf8');
    const commented = new Set([
      'apiKey',
      'workerApiKey',
      'adminKey',
      'metricsPort',
      'discovery.prefillDns',
      'discovery.decodeDns',
      'discovery.prefillSelector',
      'discovery.decodeSelector',
      'discovery.inferencePool',
      'discovery.namespace',
      'discovery.prefillPort',
      'discovery.decodePort',
      'tracing.otlpEndpoint',
      'kvEvents.port',
      'kvEvents.replayPort',
      'kvEvents.topic',
      'kvEvents.silenceMs',
      'tokenizer.dir',
      'migration.maxSeqLen',
      'tenantsFile',
      'tenantHeader',
      'tenantHeaderKeys',
      'redisUrl',
      'maxExtProcStreams',
    ]);
    const chosen = new Set(['connector', 'prefill', 'decode', 'prefillPolicy', 'decodePolicy', 'deadlines.totalMs']);
    for (const setting of SETTINGS) {
      if (commented.has(setting.key)) {
        expect(text, setting.key).toContain(`# ${setting.key.split('.').at(-1)}: `);
        continue;
      }
      const value = at(values, setting.key);
      expect(value, `${setting.key} is in the example`).not.toBeUndefined();
      if (!chosen.has(setting.key) && setting.default !== undefined) {
        expect(value, `${setting.key} shows its default`).toEqual(setting.default);
      }
    }
  });
});
