import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ConfigError, loadServeConfig } from '../../src/server/config.js';

const dir = mkdtempSync(join(tmpdir(), 'disagg-config-'));
const file = (name: string, text: string) => {
  const path = join(dir, name);
  writeFileSync(path, text);
  return path;
};

describe('disagg serve configuration', () => {
  it('from arguments, with repeated and comma-separated workers and the defaults', () => {
    const config = loadServeConfig(
      [
        '--connector',
        'vllm',
        '--prefill',
        'http://p0:8100,http://p1:8100',
        '--decode',
        'http://d0:8200',
        '--decode',
        'http://d1:8200',
      ],
      {},
    );
    expect(config).toEqual({
      connector: 'vllm',
      prefill: [{ url: 'http://p0:8100' }, { url: 'http://p1:8100' }],
      decode: [{ url: 'http://d0:8200' }, { url: 'http://d1:8200' }],
      pools: [],
      rewrites: [],
      bootstrapPort: 8998,
      adminKey: undefined,
      apiKey: undefined,
      discovery: {
        prefillDns: undefined,
        decodeDns: undefined,
        dnsIntervalMs: 10_000,
        prefillSelector: undefined,
        decodeSelector: undefined,
        namespace: undefined,
        port: 8000,
        prefillPort: undefined,
        decodePort: undefined,
        bootstrapPortAnnotation: 'sglang.ai/bootstrap-port',
        workerPortsAnnotation: 'smg.ai/worker-ports',
      },
      tracing: { sampleRatio: 1, serviceName: 'disagg' },
      host: '0.0.0.0',
      port: 8000,
      requireDisaggregation: false,
      prefillPolicy: undefined,
      decodePolicy: undefined,
      routing: {
        aggregateBelowChars: 0,
        aggregateCachedRatio: 0,
        deciders: [{ name: 'predicted-wait' }],
        cacheThreshold: 0.5,
        balanceAbsThreshold: 32,
        balanceRelThreshold: 1.1,
        maxTreeChars: 8 * 1024 * 1024,
        sessionHeader: 'x-session-id',
        prefixKeyHeader: 'x-prefix-key',
        prefixWeight: 2,
        speculativeTtlMs: 2000,
        scorers: [
          { name: 'prefix', weight: 2 },
          { name: 'slo-headroom', weight: 2 },
          { name: 'load', weight: 1 },
        ],
        filters: [{ name: 'slo-feasible' }],
        picker: { name: 'max-score' },
        engineLoadIntervalMs: 0,
        engineLoadStaleMs: 2000,
      },
      kvEvents: { port: undefined, replayPort: undefined, topic: undefined, silenceMs: 30_000 },
      tokenizer: { dir: undefined, threads: 1 },
      deadlines: { prefillFirstOutputMs: 600_000, handoffMs: 600_000, decodeFirstTokenMs: 300_000, idleMs: 120_000 },
      cleanupBudgetMs: undefined,
      healthIntervalMs: 5000,
      healthTimeoutMs: 2000,
      healthFailureThreshold: 3,
      healthSuccessThreshold: 2,
      slowClientTimeoutMs: 30_000,
      retry: { maxRetries: 2, initialBackoffMs: 50, maxBackoffMs: 1000, reuseHandoff: 'unreached', disabled: false },
      migration: { limit: 0, via: 'decode' },
      sidecar: { prefillFrom: 'pool', prefillAllow: [], prefillMaxRetries: 0 },
      responses: {
        store: 'memory',
        ttlHours: 720,
        maxObjects: 100_000,
        maxBytes: 1024 * 1024 * 1024,
        memoryBytes: 256 * 1024 * 1024,
      },
      scaling: { saturationSource: 'auto', queueDepth: 5, kvUsage: 0.8, prefillRequests: 8, decodeRequests: 256 },
      redisFailure: 'open',
      replicaSyncMs: 250,
      breaker: { failureThreshold: 5, successThreshold: 2, openMs: 10_000 },
      maxConcurrentRequests: 1024,
      queueSize: 1024,
      queueTimeoutMs: 30_000,
      preempt: false,
      gracePeriodMs: 30_000,
      drainDelayMs: 5000,
      keepAliveTimeoutMs: 72_000,
      headersTimeoutMs: 10_000,
      requestTimeoutMs: 120_000,
      maxBodyBytes: 8 * 1024 * 1024,
      logLevel: 'info',
      logFormat: 'json',
    });
  });

  it('from a YAML or JSON file and the environment; arguments win over the environment, which wins over the file', () => {
    const yaml = file(
      'disagg.yaml',
      `connector: sglang
prefill:
  - url: http://p0:30000
    bootstrapPort: 9000
  - http://p1:30000
decode: [http://d0:30000]
port: 9000
deadlines:
  idleMs: 5000
`,
    );
    const config = loadServeConfig(['--port', '9100', '--max-body-bytes', '1000'], {
      DISAGG_CONFIG: yaml,
      DISAGG_PORT: '9050',
      DISAGG_LOG_LEVEL: 'warn',
      DISAGG_KEEP_ALIVE_TIMEOUT_MS: '5000',
    });
    expect(config).toMatchObject({
      connector: 'sglang',
      prefill: [
        { url: 'http://p0:30000', bootstrapPort: 9000 },
        { url: 'http://p1:30000', bootstrapPort: 8998 },
      ],
      decode: [{ url: 'http://d0:30000' }],
      port: 9100,
      deadlines: { idleMs: 5000 },
      logLevel: 'warn',
      keepAliveTimeoutMs: 5000,
      maxBodyBytes: 1000,
    });
    const json = file(
      'disagg.json',
      JSON.stringify({ connector: 'vllm', prefill: ['http://p'], decode: ['http://d'] }),
    );
    expect(loadServeConfig(['--config', json], { DISAGG_DECODE: 'http://d9' })).toMatchObject({
      decode: [{ url: 'http://d9' }],
    });
  });

  it('a role found by DNS needs no worker list; the admin key comes from the environment', () => {
    const config = loadServeConfig(
      ['--connector', 'sglang', '--prefill-dns', 'http://prefill-headless.llm.svc:8100', '--decode', 'http://d'],
      { DISAGG_ADMIN_KEY: 'k', DISAGG_DECODE_DNS: 'https://decode-headless:8200', DISAGG_DNS_INTERVAL_MS: '2500' },
    );
    expect(config).toMatchObject({
      prefill: [],
      decode: [{ url: 'http://d' }],
      adminKey: 'k',
      discovery: {
        prefillDns: 'http://prefill-headless.llm.svc:8100',
        decodeDns: 'https://decode-headless:8200',
        dnsIntervalMs: 2500,
      },
    });
  });

  it.each([
    [
      ['--prefill', 'http://p', '--decode', 'http://d'],
      "--connector must be one of 'vllm', 'sglang', 'trtllm', got undefined",
    ],
    [
      ['--connector', 'vllm', '--decode', 'http://d'],
      '--prefill is required: at least one worker URL (or --prefill-dns',
    ],
    [['--connector', 'vllm', '--prefill', 'http://p'], '--decode is required'],
    [
      ['--connector', 'vllm', '--prefill-dns', 'http://10.0.0.1:8100', '--decode', 'http://d'],
      '--prefill-dns (discovery.prefillDns) names an address (10.0.0.1), not a host name to resolve',
    ],
    [
      ['--connector', 'vllm', '--prefill-dns', 'prefill-headless:8100', '--decode', 'http://d'],
      '--prefill-dns (discovery.prefillDns) must be an http(s) URL such as http://prefill-headless.llm.svc:8000',
    ],
    [
      ['--connector', 'vllm', '--prefill', 'http://p', '--decode-dns', 'http://d', '--dns-interval-ms', '0'],
      '--dns-interval-ms (discovery.dnsIntervalMs) must be',
    ],
    [['--connector', 'vllm', '--prefill', 'p0:8000', '--decode', 'http://d'], 'is not an http(s) URL'],
    [
      ['--connector', 'vllm', '--prefill', 'http://p', '--decode', 'http://d', '--port', 'x'],
      '--port must be a non-negative number',
    ],
    [
      ['--connector', 'vllm', '--prefill', 'http://p', '--decode', 'http://d', '--deadline-idle-ms=-1'],
      '--deadline-idle-ms (deadlines.idleMs) must be a non-negative number',
    ],
    [
      ['--connector', 'vllm', '--prefill', 'http://p', '--decode', 'http://d', '--selection', 'random'],
      '--selection must be',
    ],
    [['--nope'], 'Unknown flag --nope'],
    [['--config', '/no/such/file.yaml'], 'Cannot read the config file'],
  ])('refuses %j, saying what was expected', (args, message) => {
    expect(() => loadServeConfig(args, {})).toThrow(ConfigError);
    expect(() => loadServeConfig(args, {})).toThrow(message);
  });

  it('--disable-retries is a switch: the flag alone, or true or false in the environment and files', () => {
    const workers = ['--connector', 'vllm', '--prefill', 'http://p', '--decode', 'http://d'];
    const disabled = (args: string[], env: NodeJS.ProcessEnv) =>
      (loadServeConfig([...workers, ...args], env) as { retry: { disabled: boolean } }).retry.disabled;
    expect(disabled(['--disable-retries'], {})).toBe(true);
    expect(disabled([], { DISAGG_DISABLE_RETRIES: 'true' })).toBe(true);
    expect(disabled([], { DISAGG_DISABLE_RETRIES: 'false' })).toBe(false);
    expect(disabled([], {})).toBe(false);
    expect(() => loadServeConfig(workers, { DISAGG_DISABLE_RETRIES: 'maybe' })).toThrow('must be true or false');
  });

  it('an unknown flag gets the closest one as a hint, and every unknown flag is named at once', () => {
    const error = (() => {
      try {
        loadServeConfig(['--prefil', 'http://p', '--decode', 'http://d', '--conector=vllm', '--xyzzy'], {});
      } catch (caught) {
        return caught as ConfigError;
      }
      throw new Error('accepted');
    })();
    expect(error).toBeInstanceOf(ConfigError);
    expect(error.problems).toEqual([
      'Unknown flag --prefil; did you mean --prefill?',
      'Unknown flag --conector; did you mean --connector?',
      'Unknown flag --xyzzy',
    ]);
  });

  it('every problem of a configuration is reported at once: file keys, variables and values, each on its line', () => {
    const path = file(
      'many.yaml',
      'connector: vllm\nprefill: [http://p]\ndecode: [http://d]\nportt: 8000\nroutnig: {}\nport: x\n',
    );
    let error: ConfigError | undefined;
    try {
      loadServeConfig(['--config', path, '--selection', 'random'], { DISAGG_PORTT: '1' });
    } catch (caught) {
      error = caught as ConfigError;
    }
    expect(error).toBeInstanceOf(ConfigError);
    expect(error?.problems).toHaveLength(5);
    expect(error?.problems.join('\n')).toMatch(/DISAGG_PORTT.*DISAGG_PORT/);
    expect(error?.problems.join('\n')).toMatch(/"portt".*did you mean "port"/);
    expect(error?.problems.join('\n')).toMatch(/"routnig".*did you mean "routing/);
    expect(error?.problems.join('\n')).toContain('--selection must be');
    expect(error?.problems.join('\n')).toContain('must be a non-negative number');
    expect(error?.message).toMatch(/^5 problems:\n {2}- /);
  });

  it('a worker list that was refused is not also reported as missing', () => {
    let error: ConfigError | undefined;
    try {
      loadServeConfig(['--connector', 'vllm', '--prefill', 'p0:8000', '--decode', 'http://d'], {});
    } catch (caught) {
      error = caught as ConfigError;
    }
    expect(error?.problems).toHaveLength(1);
    expect(error?.message).toContain('is not an http(s) URL');
  });

  it('--help asks for the usage', () => {
    expect(loadServeConfig(['--help'], {})).toBe('help');
  });
});
