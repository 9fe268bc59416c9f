import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { DEFAULT_DEADLINES } from '../../src/flow/deadlines.js';
import { DEFAULT_CLEANUP_BUDGET_MS } from '../../src/flow/decode-leg.js';
import { loadServeConfig, SERVE_USAGE } from '../../src/server/config.js';
import {
  ConfigError,
  checkWorker,
  resolveHandlerOptions,
  resolveProxyOptions,
  SETTINGS,
} from '../../src/server/options.js';
import { createProxy } from '../../src/server/proxy.js';

const dir = mkdtempSync(join(tmpdir(), 'disagg-options-'));
const file = (name: string, text: string) => {
  const path = join(dir, name);
  writeFileSync(path, text);
  return path;
};
const workers = ['--connector', 'vllm', '--prefill', 'http://p', '--decode', 'http://d'];
const refusal = (run: () => unknown): ConfigError => {
  try {
    run();
  } catch (error) {
    expect(ConfigError.is(error)).toBe(true);
    expect((error as ConfigError).code).toBe('DISAGG_CONFIG');
    return error as ConfigError;
  }
  throw new Error('expected a ConfigError');
};

describe('one table of settings for createProxy, disagg serve and its help', () => {
  it('a config file key it does not know is refused by name, with the closest known one', () => {
    const typo = file('typo.yaml', 'connector: vllm\nprefil: [http://p]\ndecode: [http://d]\n');
    // Both true, both said: the misspelt key and so the missing list.
    expect(refusal(() => loadServeConfig(['--config', typo], {})).problems).toEqual([
      `Unknown setting "prefil" in ${typo}; did you mean "prefill"?`,
      '--prefill is required: at least one worker URL (or --prefill-dns or --prefill-selector to find them)',
    ]);
    const flat = file(
      'flat.yaml',
      'connector: vllm\nprefill: [http://p]\ndecode: [http://d]\ndeadlineTotalMs: 60000\n',
    );
    expect(refusal(() => loadServeConfig(['--config', flat], {})).message).toContain(
      'did you mean "deadlines.totalMs"?',
    );
    const sglang = file(
      'sglang.yaml',
      'connector: sglang\nprefill: [http://p]\ndecode: [http://d]\nbootstrap_port: 9000\n',
    );
    expect(refusal(() => loadServeConfig(['--config', sglang], {})).message).toContain('did you mean "bootstrapPort"?');
    const nested = file(
      'nested.yaml',
      'connector: vllm\nprefill: [http://p]\ndecode: [http://d]\ndeadlines: { idle: 5 }\n',
    );
    expect(refusal(() => loadServeConfig(['--config', nested], {})).message).toContain('"deadlines.idle"');
  });

  it('a worker field it does not know is refused, with the closest known one', () => {
    const path = file(
      'worker.yaml',
      'connector: sglang\nprefill: [{ url: "http://p", bootstrap_port: 9000 }]\ndecode: [http://d]\n',
    );
    expect(refusal(() => loadServeConfig(['--config', path], {})).message).toBe(
      `prefill in ${path} has an unknown worker field "bootstrap_port"; did you mean "bootstrapPort"?`,
    );
  });

  it('an error names the setting as it was given: the file key, the variable, the flag', () => {
    const path = file(
      'port.json',
      JSON.stringify({ connector: 'vllm', prefill: ['http://p'], decode: ['http://d'], port: 'x' }),
    );
    expect(refusal(() => loadServeConfig(['--config', path], {})).message).toMatch(
      new RegExp(`^port in ${path} must be`),
    );
    expect(refusal(() => loadServeConfig(workers, { DISAGG_PORT: 'x' })).message).toMatch(/^DISAGG_PORT must be/);
    expect(refusal(() => loadServeConfig([...workers, '--port', 'x'], {})).message).toMatch(/^--port must be/);
    expect(
      refusal(() => createProxy({ connector: 'vllm', prefill: [{ url: 'http://p' }], decode: [], port: 1 } as never))
        .message,
    ).toMatch(/^2 problems:\n {2}- Unknown option "port" of createProxy/);
  });

  it('routing: a policy per leg (else --selection), the cache-aware thresholds checked, the session header named', () => {
    const config = loadServeConfig(
      [...workers, '--prefill-policy', 'cache-aware', '--cache-threshold', '0.3', '--session-header', 'X-Conversation'],
      { DISAGG_DECODE_POLICY: 'session', DISAGG_BALANCE_REL_THRESHOLD: '1.5' },
    );
    expect(config).toMatchObject({
      prefillPolicy: 'cache-aware',
      decodePolicy: 'session',
      routing: { cacheThreshold: 0.3, balanceRelThreshold: 1.5, sessionHeader: 'x-conversation' },
    });
    const resolved = resolveProxyOptions({
      connector: 'vllm',
      prefill: [{ url: 'http://p' }],
      decode: [{ url: 'http://d' }],
      selection: 'round-robin',
      decodePolicy: 'power-of-two',
    });
    expect([resolved.prefillPolicy, resolved.decodePolicy]).toEqual(['round-robin', 'power-of-two']);
    expect(refusal(() => loadServeConfig([...workers, '--prefill-policy', 'consistent-hsh'], {})).message).toBe(
      "--prefill-policy must be one of 'least-in-flight', 'round-robin', 'cache-aware', 'power-of-two', 'session', 'random', 'precise-prefix', 'consistent-hash', 'scored', got \"consistent-hsh\" (did you mean 'consistent-hash'?)",
    );
    expect(refusal(() => loadServeConfig([...workers, '--prefill-policy', 'fastest'], {})).message).toBe(
      "--prefill-policy must be one of 'least-in-flight', 'round-robin', 'cache-aware', 'power-of-two', 'session', 'random', 'precise-prefix', 'consistent-hash', 'scored', got \"fastest\"",
    );
    expect(refusal(() => loadServeConfig([...workers, '--cache-threshold', '1.5'], {})).message).toBe(
      '--cache-threshold (routing.cacheThreshold) must be a number from 0 to 1, got "1.5"',
    );
    expect(refusal(() => loadServeConfig([...workers, '--balance-rel-threshold', '0.9'], {})).message).toMatch(
      /^--balance-rel-threshold \(routing.balanceRelThreshold\) must be a number of 1 or more/,
    );
    expect(refusal(() => loadServeConfig([...workers, '--session-header', 'x session'], {})).message).toMatch(
      /^--session-header \(routing.sessionHeader\) must be an HTTP header name/,
    );
  });

  it('the clean-up budget: the loader and createProxy refuse 0 as disaggregate does, and apply its default', () => {
    expect(refusal(() => loadServeConfig([...workers, '--cleanup-budget-ms', '0'], {})).message).toBe(
      '--cleanup-budget-ms must be a positive number of milliseconds, got "0"',
    );
    const options = { connector: 'vllm' as const, prefill: [{ url: 'http://p' }], decode: [{ url: 'http://d' }] };
    expect(refusal(() => createProxy({ ...options, cleanupBudgetMs: 0 })).message).toBe(
      'cleanupBudgetMs must be a positive number of milliseconds, got 0',
    );
    expect(resolveProxyOptions(options).cleanupBudgetMs).toBe(DEFAULT_CLEANUP_BUDGET_MS);
  });

  it('createProxy takes the same settings with the same defaults, and suggests a near name', () => {
    const resolved = resolveProxyOptions({
      connector: 'sglang',
      prefill: [{ url: 'http://p0:30000' }, { url: 'http://p1:30000', bootstrapPort: 9001 }],
      decode: [{ url: 'http://d0:30000' }],
    });
    expect(resolved).toMatchObject({
      prefillPolicy: 'scored',
      decodePolicy: 'scored',
      healthIntervalMs: 5000,
      slowClientTimeoutMs: 30_000,
      keepAliveTimeoutMs: 72_000,
      gracePeriodMs: 30_000,
      maxBodyBytes: 8 * 1024 * 1024,
      deadlines: { prefillFirstOutputMs: 600_000, handoffMs: 600_000, decodeFirstTokenMs: 300_000, idleMs: 120_000 },
      prefill: [
        { url: 'http://p0:30000', bootstrapPort: 8998 },
        { url: 'http://p1:30000', bootstrapPort: 9001 },
      ],
    });
    expect(
      refusal(() =>
        resolveProxyOptions({
          connector: 'vllm',
          prefill: [{ url: 'http://p' }],
          decode: [{ url: 'http://d' }],
          selectoin: 'round-robin',
        } as never),
      ).message,
    ).toBe('Unknown option "selectoin" of createProxy; did you mean "selection"?');
  });

  it('an unknown DISAGG_ variable is refused with a hint; the variables Kubernetes sets for a Service are not settings', () => {
    expect(refusal(() => loadServeConfig(workers, { DISAGG_DEADLINE_TOTAL: '5' })).message).toBe(
      'Unknown environment variable DISAGG_DEADLINE_TOTAL; did you mean "DISAGG_DEADLINE_TOTAL_MS"?',
    );
    const config = loadServeConfig(workers, {
      DISAGG_SERVICE_HOST: '10.0.0.11',
      DISAGG_SERVICE_PORT: '8000',
      DISAGG_PORT: 'tcp://10.0.0.11:8000',
      DISAGG_PORT_8000_TCP_ADDR: '10.0.0.11',
    });
    expect(config).toMatchObject({ port: 8000 });
  });

  it('every setting belongs to one concern, listed together under one heading of --help', () => {
    const groups = SETTINGS.map((setting) => setting.group);
    expect(groups.every((group) => group !== undefined)).toBe(true);
    const runs = groups.filter((group, i) => group !== groups[i - 1]);
    expect(new Set(runs).size).toBe(runs.length);
    const usage = SERVE_USAGE;
    for (const group of runs) expect(usage.split('\n').filter((line) => line === `${group}:`)).toHaveLength(1);
  });

  it('--help lists every setting with its flag, variable, file key and default', () => {
    for (const setting of SETTINGS) {
      expect(SERVE_USAGE).toContain(`--${setting.flag} ${setting.arg}`);
      expect(SERVE_USAGE).toContain(`${setting.env}; ${setting.key} in a file`);
    }
    expect(SERVE_USAGE).toContain(`(default ${DEFAULT_CLEANUP_BUDGET_MS})`);
  });

  it('docs/cli-reference.md holds --help as the binary prints it, and every setting there says what it does', () => {
    const reference = readFileSync(new URL('../../docs/cli-reference.md', import.meta.url), 'utf8');
    const block =
      /<!-- disagg serve --help: begin[^\n]*-->\n```text\n([\s\S]*?)```\n<!-- disagg serve --help: end -->/.exec(
        reference,
      );
    expect(block?.[1], 'docs/cli-reference.md is out of date: run npm run docs:cli').toBe(SERVE_USAGE);
    for (const setting of SETTINGS) expect(setting.help.trim(), setting.key).not.toBe('');
  });

  it('a prefill worker with dpSize but no dpRank is refused up front; keys come from flags or the environment', () => {
    const path = file('dp.yaml', 'connector: sglang\nprefill: [{ url: "http://p", dpSize: 4 }]\ndecode: [http://d]\n');
    expect(refusal(() => loadServeConfig(['--config', path], {})).message).toContain('dpSize 4 but no dpRank');
    expect(
      loadServeConfig(['--connector', 'trtllm', '--prefill', 'http://p', '--decode', 'http://d', '--api-key', 'a'], {
        DISAGG_WORKER_API_KEY: 'w',
      }),
    ).toMatchObject({ connector: 'trtllm', apiKey: 'a', workerApiKey: 'w' });
  });

  it('every phase but the total has a deadline by default, so that every hang ends; 0 turns one off', () => {
    const workers = { connector: 'vllm' as const, prefill: [{ url: 'http://p' }], decode: [{ url: 'http://d' }] };
    expect(resolveProxyOptions(workers).deadlines).toEqual(DEFAULT_DEADLINES);
    // 0 goes on to the flow, which turns that deadline off.
    expect(resolveProxyOptions({ ...workers, deadlines: { idleMs: 0, totalMs: 60_000 } }).deadlines).toEqual({
      prefillFirstOutputMs: 600_000,
      handoffMs: 600_000,
      decodeFirstTokenMs: 300_000,
      idleMs: 0,
      totalMs: 60_000,
    });
  });
});

describe('what createProxy, createHandler and the admin API take besides the settings', () => {
  const base = { connector: 'vllm' as const, prefill: [{ url: 'http://p' }], decode: [{ url: 'http://d' }] };
  const message = (run: () => unknown) => refusal(run).message;

  it('the injected objects are checked for what they must be, and kept as given', () => {
    expect(message(() => resolveProxyOptions(null as never))).toBe('createProxy expects an options object, got null');
    expect(message(() => resolveProxyOptions({ ...base, tracer: {} as never }))).toBe(
      'tracer must be an OpenTelemetry tracer, got {}',
    );
    expect(message(() => resolveProxyOptions({ ...base, metricsRegistry: {} as never }))).toContain(
      'metricsRegistry must be a prom-client Registry',
    );
    expect(message(() => resolveProxyOptions({ ...base, dnsLookup: 'dns' as never }))).toContain(
      'dnsLookup must be a function, got',
    );
    expect(message(() => resolveProxyOptions({ ...base, logger: 'info' as never }))).toContain(
      'logger must be a pino logger, got',
    );
    expect(message(() => resolveProxyOptions({ ...base, onEvent: {} as never }))).toContain(
      'onEvent must be a function, got',
    );
    const tracer = { startSpan() {} } as never;
    const metricsRegistry = { registerMetric() {} } as never;
    const dnsLookup = (() => {}) as never;
    const logger = {} as never;
    const onEvent = () => {};
    const dispatcher = {} as never;
    const kubeConfig = {};
    expect(
      resolveProxyOptions({ ...base, tracer, metricsRegistry, dnsLookup, logger, onEvent, dispatcher, kubeConfig }),
    ).toMatchObject({
      dispatcher,
      kubeConfig,
      tracer,
      metricsRegistry,
      dnsLookup,
      logger,
      onEvent,
    });
  });

  it('serving on decode alone by its cache needs the cache-aware decode policy', () => {
    expect(message(() => resolveProxyOptions({ ...base, routing: { aggregateCachedRatio: 0.5 } }))).toContain(
      "needs decodePolicy 'cache-aware' or 'precise-prefix' (--decode-policy): only then does the router know what decode workers hold; decodePolicy is 'scored'",
    );
    expect(
      resolveProxyOptions({ ...base, decodePolicy: 'cache-aware', routing: { aggregateCachedRatio: 0.5 } }).routing,
    ).toMatchObject({ aggregateCachedRatio: 0.5 });
    expect(resolveProxyOptions({ ...base, routing: { aggregateCachedRatio: 0 } }).decodePolicy).toBe('scored');
  });

  it("createHandler's base path starts with / and does not end with one; none by default", () => {
    expect(message(() => resolveHandlerOptions(undefined as never))).toBe(
      'createHandler expects an options object, got undefined',
    );
    for (const basePath of ['llm', '/llm/', '/', 5]) {
      expect(message(() => resolveHandlerOptions({ ...base, basePath: basePath as never }))).toContain(
        "basePath must be a path that starts with / and does not end with one, such as '/llm', got",
      );
    }
    expect(resolveHandlerOptions({ ...base, basePath: '/llm/v2' }).basePath).toBe('/llm/v2');
    const plain = resolveHandlerOptions(base);
    expect(plain.basePath).toBe('');
    expect(plain.proxy).toEqual(resolveProxyOptions(base));
    expect(message(() => resolveHandlerOptions({ ...base, bogus: 1 } as never))).toContain('Unknown option "bogus"');
  });

  it('a worker joining at run time is one URL or one object, checked as --prefill is; SGLang prefill gets the bootstrap port', () => {
    const vllm = { connector: 'vllm' as const, bootstrapPort: 8998 };
    const sglang = { connector: 'sglang' as const, bootstrapPort: 8998 };
    for (const value of [undefined, '', [], ['http://a', 'http://b']]) {
      expect(message(() => checkWorker('decode', value, vllm))).toContain(
        'A decode worker is a URL or an object with a url, got',
      );
    }
    expect(message(() => checkWorker('prefill', { url: 'ftp://x' }, vllm))).toContain('not an http(s) URL');
    expect(message(() => checkWorker('prefill', ',', vllm))).toBe(
      'A prefill worker is a URL or an object with a url, got ","',
    );
    expect(checkWorker('decode', 'http://d:8200', vllm)).toEqual({ url: 'http://d:8200' });
    expect(checkWorker('decode', ['http://d:8200'], sglang)).toEqual({ url: 'http://d:8200' });
    expect(checkWorker('prefill', 'http://p:8100', vllm)).toEqual({ url: 'http://p:8100' });
    expect(checkWorker('prefill', { url: 'http://p:8100', name: 'p' }, sglang)).toMatchObject({
      url: 'http://p:8100',
      name: 'p',
      bootstrapPort: 8998,
    });
    expect(checkWorker('prefill', { url: 'http://p:8100', bootstrapPort: 9000 }, sglang)).toMatchObject({
      bootstrapPort: 9000,
    });
  });

  it('a config file that is not JSON or YAML, or not an object, or whose deadlines are not an object, is refused by name', () => {
    expect(message(() => loadServeConfig(['--config', file('bad.json', '{"connector":')], {}))).toMatch(
      /^The config file .*bad\.json is not valid JSON: /,
    );
    expect(message(() => loadServeConfig(['--config', file('bad.yaml', 'a: [1,')], {}))).toMatch(
      /^The config file .*bad\.yaml is not valid YAML: /,
    );
    for (const [name, text] of [
      ['list.yaml', '- a\n- b\n'],
      ['null.json', 'null'],
      ['number.json', '5'],
    ]) {
      expect(message(() => loadServeConfig(['--config', file(name as string, text as string)], {}))).toMatch(
        /must hold an object of settings$/,
      );
    }
    const deadlines = file(
      'deadlines.yaml',
      'connector: vllm\nprefill: [http://p]\ndecode: [http://d]\ndeadlines: 5\n',
    );
    expect(message(() => loadServeConfig(['--config', deadlines], {}))).toMatch(
      /^The setting "deadlines" in .*deadlines\.yaml: deadlines must be an object of budgets$/,
    );
  });

  it('each kind of value says what it expected', () => {
    const flagged = (...args: string[]) => message(() => loadServeConfig([...workers, ...args], {}));
    expect(flagged('--health-failure-threshold', '0')).toContain('must be a positive whole number, got "0"');
    expect(flagged('--queue-size=-1')).toContain('must be a whole number of 0 or more, got "-1"');
    expect(flagged('--host', '')).toContain('must be a non-empty string, got ""');
    expect(flagged('--prefill-dns', 'not a url')).toContain(
      'must be an http(s) URL such as http://prefill-headless.llm.svc:8000, got "not a url"',
    );
    expect(flagged('--prefill', 'http://p,{"url":1}')).toContain('not an http(s) URL');
  });

  it('a misspelt or misplaced key inside a group is refused, not ignored in favour of its default', () => {
    const yaml = (name: string, extra: string) =>
      file(name, `connector: vllm\nprefill: [http://p]\ndecode: [http://d]\n${extra}\n`);
    expect(
      message(() => loadServeConfig(['--config', yaml('typo.yaml', 'routing: { cacheTreshold: 0.5 }')], {})),
    ).toMatch(/^Unknown setting "routing\.cacheTreshold" in .*typo\.yaml; did you mean "routing\.cacheThreshold"\?$/);
    expect(message(() => loadServeConfig(['--config', yaml('flat.yaml', 'retry: 3')], {}))).toMatch(
      /^The setting "retry" in .*flat\.yaml: retry must be an object of settings$/,
    );
    expect(message(() => resolveProxyOptions({ ...base, breaker: { openMS: 5 } } as never))).toBe(
      'Unknown option "breaker.openMS" of createProxy; did you mean "breaker.openMs"?',
    );
    expect(message(() => resolveProxyOptions({ ...base, discovery: [] } as never))).toBe(
      'The option "discovery" of createProxy: discovery must be an object of settings',
    );
    expect(message(() => resolveProxyOptions({ ...base, zzzzzzzzzzzz: 1 } as never))).toBe(
      'Unknown option "zzzzzzzzzzzz" of createProxy',
    );
    expect(resolveProxyOptions({ ...base, retry: undefined }).retry).toEqual(resolveProxyOptions(base).retry);
  });

  it('numbers, ports, ratios, switches, header names and DNS names are checked for what each must be', () => {
    const flagged =
      (...args: string[]) =>
      () =>
        loadServeConfig([...workers, ...args], {});
    const refused = (...args: string[]) => message(flagged(...args));
    expect(refused('--health-failure-threshold', '1.5')).toContain('must be a positive whole number');
    expect(flagged('--health-failure-threshold', '1')()).toMatchObject({ healthFailureThreshold: 1 });
    expect(refused('--queue-size', '2.5')).toContain('must be a whole number of 0 or more');
    expect(flagged('--queue-size', '0')()).toMatchObject({ queueSize: 0 });
    for (const port of ['65536', '-1', '80.5']) expect(refused(`--port=${port}`)).toContain('a port, 0-65535');
    expect(flagged('--port', '65535')()).toMatchObject({ port: 65535 });
    expect(flagged('--port', '0')()).toMatchObject({ port: 0 });
    for (const ratio of ['1.01', '-0.1']) expect(refused(`--cache-threshold=${ratio}`)).toContain('from 0 to 1');
    expect(flagged('--cache-threshold', '1')()).toMatchObject({ routing: { cacheThreshold: 1 } });
    expect(flagged('--cache-threshold', '0')()).toMatchObject({ routing: { cacheThreshold: 0 } });
    expect(refused('--balance-rel-threshold', '0.99')).toContain('got "0.99"');
    expect(flagged('--balance-rel-threshold', '1')()).toMatchObject({ routing: { balanceRelThreshold: 1 } });
    expect(refused('--session-header', 'x session')).toContain('"x session"');
    expect(refused('--log-format', 'xml')).toContain("must be 'json' or 'pretty', got \"xml\"");
    const env = (variables: Record<string, string>) => loadServeConfig(workers, variables);
    for (const [value, disabled] of [
      ['true', true],
      ['1', true],
      ['false', false],
      ['0', false],
    ] as const) {
      expect(env({ DISAGG_DISABLE_RETRIES: value })).toMatchObject({ retry: { disabled } });
    }
    expect(message(() => env({ DISAGG_DISABLE_RETRIES: 'yes' }))).toContain('must be true or false, got "yes"');
    expect(message(() => env({ DISAGG_QUEUE_SIZE: ' ' }))).toContain('DISAGG_QUEUE_SIZE');
    for (const url of ['http://10.0.0.1:8000', 'http://[::1]:8000']) {
      expect(refused('--prefill-dns', url)).toContain('not a host name to resolve');
    }
    expect(refused('--prefill-dns', 'ftp://prefill.svc')).toContain('must be an http(s) URL');
    for (const url of ['http://prefill-1:8000', 'http://1prefill.svc:8000', 'https://p.llm.svc.cluster.local']) {
      expect(flagged('--prefill-dns', url)()).toMatchObject({ discovery: { prefillDns: url } });
    }
  });

  it('worker lists: entries trimmed, empty ones dropped, names and hosts as text, the rest whole numbers, URLs with a host', () => {
    expect(
      loadServeConfig(['--connector', 'vllm', '--prefill', ' http://a , ,http://b', '--decode', 'http://d,'], {}),
    ).toMatchObject({
      prefill: [{ url: 'http://a' }, { url: 'http://b' }],
      decode: [{ url: 'http://d' }],
    });
    const listed = (name: string, entries: string) => () =>
      loadServeConfig(['--config', file(name, `connector: sglang\ndecode: [http://d]\nprefill: ${entries}\n`)], {});
    expect(
      listed(
        'named.yaml',
        '[{ url: "http://p", name: p0, bootstrapHost: boot, bootstrapPort: 9000, dpRank: 0, dpSize: 2 }]',
      )(),
    ).toMatchObject({
      prefill: [{ url: 'http://p', name: 'p0', bootstrapHost: 'boot', bootstrapPort: 9000, dpRank: 0, dpSize: 2 }],
    });
    expect(message(listed('number.yaml', '[5]'))).toContain('takes URLs or objects with a url, got 5');
    expect(message(listed('list.yaml', '[[http://p]]'))).toContain('takes URLs or objects with a url');
    expect(message(listed('rank.yaml', '[{ url: "http://p", dpRank: "1", dpSize: 2 }]'))).toContain(
      'has a worker whose dpRank is not a whole number: "1"',
    );
    for (const url of ['http://', 'xhttp://p', 'p:8000']) {
      expect(message(listed(`url-${url.length}.yaml`, `[{ url: "${url}" }]`))).toContain(
        `has "${url}", which is not an http(s) URL`,
      );
    }
    expect(message(listed('no-url.yaml', '[{ name: p }]'))).toContain('has {"name":"p"}, which is not an http(s) URL');
  });

  it('files: .yml and .YAML are YAML, anything else JSON; an empty DISAGG_CONFIG or variable is as if unset; DISAGG_PORT is a port unless it is a Kubernetes service link', () => {
    const settings = 'connector: vllm\nprefill: [http://p]\ndecode: [http://d]\n';
    expect(loadServeConfig(['--config', file('short.yml', settings)], {})).toMatchObject({ connector: 'vllm' });
    expect(loadServeConfig(['--config', file('UPPER.YAML', settings)], {})).toMatchObject({ connector: 'vllm' });
    expect(message(() => loadServeConfig(['--config', file('settings.yaml.json', settings)], {}))).toContain(
      'is not valid JSON',
    );
    expect(loadServeConfig(workers, { DISAGG_CONFIG: '', DISAGG_HOST: '' })).toMatchObject({ host: '0.0.0.0' });
    expect(loadServeConfig(workers, { DISAGG_PORT: '9000' })).toMatchObject({ port: 9000 });
    expect(loadServeConfig(workers, { DISAGG_PORT: 'tcp://10.0.0.11:8000' })).toMatchObject({ port: 8000 });
  });

  it('--prefill and --decode repeat; where and how the process runs are settings of disagg serve only', () => {
    expect(
      loadServeConfig(
        ['--connector', 'vllm', '--prefill', 'http://p1', '--prefill', 'http://p2', '--decode', 'http://d'],
        {},
      ),
    ).toMatchObject({ prefill: [{ url: 'http://p1' }, { url: 'http://p2' }] });
    expect(
      loadServeConfig(
        ['--connector', 'vllm', '--prefill', 'http://p', '--decode', 'http://d1', '--decode', 'http://d2'],
        {},
      ),
    ).toMatchObject({ decode: [{ url: 'http://d1' }, { url: 'http://d2' }] });
    const named = file(
      'decode-named.yaml',
      'connector: vllm\nprefill: [http://p]\ndecode: [{ url: "http://d", name: d0 }]\n',
    );
    expect(loadServeConfig(['--config', named], {})).toMatchObject({ decode: [{ url: 'http://d', name: 'd0' }] });
    for (const key of ['host', 'port', 'logFormat', 'logLevel']) {
      expect(message(() => resolveProxyOptions({ ...base, [key]: 'x' } as never))).toContain(
        `Unknown option "${key}" of createProxy`,
      );
    }
  });
});

describe('workers checked as they are given', () => {
  const base = { connector: 'vllm' as const, decode: [{ url: 'http://d' }] };
  it('a URL that ends in /v1 is refused with the base URL to give instead (the proxy adds /v1/completions itself)', () => {
    expect(() => resolveProxyOptions({ ...base, prefill: [{ url: 'http://p0:8100/v1' }] })).toThrow(
      /ends in \/v1: give the worker's base URL \(http:\/\/p0:8100\)/,
    );
    expect(() => resolveProxyOptions({ ...base, prefill: [{ url: 'http://p0:8100/v1/' }] })).toThrow(/ends in \/v1/);
    expect(resolveProxyOptions({ ...base, prefill: [{ url: 'http://p0:8100/vllm' }] }).prefill).toHaveLength(1);
  });

  it('two workers of one name are refused, in a pool or across both', () => {
    expect(() =>
      resolveProxyOptions({
        ...base,
        prefill: [
          { url: 'http://p0', name: 'a' },
          { url: 'http://p1', name: 'a' },
        ],
      }),
    ).toThrow(/names two workers "a"|Two workers are named "a"/);
    expect(() =>
      resolveProxyOptions({
        connector: 'vllm',
        prefill: [{ url: 'http://p0', name: 'x' }],
        decode: [{ url: 'http://d', name: 'x' }],
      }),
    ).toThrow('Two workers are named "x": give each its own name (or none)');
  });
});

describe("an operator's URLs, key lists and policies checked before anything starts", () => {
  const problems = (...args: string[]) => refusal(() => loadServeConfig([...workers, ...args], {})).problems;
  const config = (argv: string[]) => {
    const loaded = loadServeConfig(argv, {});
    if (loaded === 'help') throw new Error('expected a config, got help');
    return loaded;
  };

  it('--otlp-endpoint takes an http(s) URL with a host, and says what one looks like', () => {
    for (const bad of ['collector:4318', 'ftp://collector:4318', 'not a url', 'http://']) {
      expect(problems('--otlp-endpoint', bad)).toEqual([
        `--otlp-endpoint (tracing.otlpEndpoint) must be an http(s) URL such as http://otel-collector:4318, got ${JSON.stringify(bad)}`,
      ]);
    }
    expect(config([...workers, '--otlp-endpoint', 'https://gateway.example/otlp']).tracing?.otlpEndpoint).toBe(
      'https://gateway.example/otlp',
    );
  });

  it('--redis-url takes redis:// or rediss:// with a host', () => {
    for (const bad of ['http://redis:6379', 'redis://', 'redis:6379']) {
      expect(problems('--redis-url', bad)).toEqual([
        `--redis-url must be a redis:// or rediss:// URL, got ${JSON.stringify(bad)}`,
      ]);
    }
    expect(config([...workers, '--redis-url', 'rediss://redis:6380/2']).redisUrl).toBe('rediss://redis:6380/2');
  });

  it('a list of keys is trimmed, drops blanks, and must name one', () => {
    expect(problems('--tenant-header-keys', ' , ')).toEqual(['--tenant-header-keys must name at least one key']);
    expect(config([...workers, '--tenant-header-keys', ' sk-a ,, sk-b ']).tenantHeaderKeys).toEqual(['sk-a', 'sk-b']);
    const keys = file(
      'keys.yaml',
      'connector: vllm\nprefill: [http://p]\ndecode: [http://d]\ntenantHeaderKeys: [" sk-a ", 7, ""]\n',
    );
    expect(config(['--config', keys]).tenantHeaderKeys).toEqual(['sk-a']);
  });

  it("precise-prefix without the engines' KV events is refused for either pool, and says where to get them", () => {
    const base = { connector: 'vllm' as const, prefill: [{ url: 'http://p' }], decode: [{ url: 'http://d' }] };
    expect(() => resolveProxyOptions({ ...base, prefillPolicy: 'precise-prefix' })).toThrow(
      "prefillPolicy 'precise-prefix' routes on the engines' KV cache events: set kvEvents.port (--kv-events-port, the port of the workers' --kv-events-config endpoint) or give the workers kvEvents endpoints",
    );
    expect(() => resolveProxyOptions({ ...base, decodePolicy: 'precise-prefix' })).toThrow(
      /^decodePolicy 'precise-prefix' routes on the engines' KV cache events/,
    );
    // Either way of naming the events will do: a port for every worker, or a worker's own endpoint.
    expect(
      resolveProxyOptions({ ...base, prefillPolicy: 'precise-prefix', kvEvents: { port: 5557 } }).prefillPolicy,
    ).toBe('precise-prefix');
    for (const role of ['prefill', 'decode'] as const) {
      const own = { ...base, [role]: [{ url: `http://${role[0]}`, kvEvents: 'tcp://w:5557' }] };
      expect(resolveProxyOptions({ ...own, prefillPolicy: 'precise-prefix' }).prefillPolicy).toBe('precise-prefix');
    }
  });
});

describe('options: each check on its own, as a user meets it', () => {
  const base = { connector: 'vllm' as const, prefill: [{ url: 'http://p' }], decode: [{ url: 'http://d' }] };
  const problemsOf = (run: () => unknown) => refusal(run).problems;
  const served = (argv: string[], env: NodeJS.ProcessEnv = {}) => {
    const loaded = loadServeConfig(argv, env);
    if (loaded === 'help') throw new Error('expected a config, got help');
    return loaded;
  };

  it('a word after the flags is refused with what the argument parser says, not as an unknown flag', () => {
    expect(refusal(() => loadServeConfig([...workers, 'extra'], {})).message).toMatch(/^Unexpected argument 'extra'/);
  });

  it('--prefix-weight takes a number above 0', () => {
    for (const bad of ['0', '-1', 'heavy']) {
      expect(problemsOf(() => loadServeConfig([...workers, `--prefix-weight=${bad}`], {}))).toEqual([
        `--prefix-weight (routing.prefixWeight) takes a number above 0, got ${JSON.stringify(bad)}`,
      ]);
    }
    expect(served([...workers, '--prefix-weight', '0.5']).routing?.prefixWeight).toBe(0.5);
    // From createProxy, a boolean is not a number (nor 1).
    expect(problemsOf(() => resolveProxyOptions({ ...base, routing: { prefixWeight: true as never } }))).toEqual([
      'routing.prefixWeight takes a number above 0, got true',
    ]);
  });

  it('a worker entry is a URL or an object: null and numbers are refused, and so is a pool that is not a list', () => {
    expect(problemsOf(() => resolveProxyOptions({ ...base, prefill: [null as never] }))).toEqual([
      'prefill takes URLs or objects with a url, got null',
    ]);
    expect(problemsOf(() => resolveProxyOptions({ ...base, prefill: 5 as never }))).toEqual([
      '--prefill is required: at least one worker URL (or --prefill-dns or --prefill-selector to find them)',
    ]);
  });

  it("a worker's name is a non-empty string; its url says it is not a URL, not that it is not a string", () => {
    for (const [name, shown] of [
      ['', '""'],
      [5, '5'],
    ] as const) {
      expect(
        problemsOf(() => resolveProxyOptions({ ...base, prefill: [{ url: 'http://p', name: name as never }] })),
      ).toEqual([`prefill has a worker whose name is not a non-empty string: ${shown}`]);
    }
    expect(problemsOf(() => resolveProxyOptions({ ...base, prefill: [{ url: 5 as never }] }))).toEqual([
      'prefill has 5, which is not an http(s) URL such as http://10.0.0.2:8000',
    ]);
  });

  it('only a URL that ends in /v1 is refused, and the base URL it suggests keeps an earlier /v1', () => {
    expect(resolveProxyOptions({ ...base, prefill: [{ url: 'http://gw/v1/team' }] }).prefill).toHaveLength(1);
    expect(() => resolveProxyOptions({ ...base, prefill: [{ url: 'http://gw/v1/team/v1' }] })).toThrow(
      "give the worker's base URL (http://gw/v1/team)",
    );
  });

  it('two workers of one name in one pool are refused once, by that pool; unnamed workers are many', () => {
    expect(
      problemsOf(() =>
        resolveProxyOptions({
          ...base,
          prefill: [{ url: 'http://p0', name: 'a' }, { url: 'http://p1' }, { url: 'http://p2', name: 'a' }],
        }),
      ),
    ).toEqual(['prefill names two workers "a": a name is one worker']);
    expect(
      resolveProxyOptions({
        ...base,
        prefill: [{ url: 'http://p0' }, { url: 'http://p1' }, { url: 'http://p2', name: 'b' }],
      }).prefill,
    ).toHaveLength(3);
  });

  it('only DISAGG_ variables are checked, and of the Service links only the ones Kubernetes makes', () => {
    expect(served(workers, { PATH: '/usr/bin', HOME: '/root', PORT: '1' }).port).toBe(8000);
    expect(problemsOf(() => loadServeConfig(workers, { DISAGG_PORTS: 'tcp://10.0.0.11:8000' }))).toEqual([
      expect.stringMatching(/^Unknown environment variable DISAGG_PORTS/),
    ]);
  });

  it('createProxy and createHandler want an object, and a group of settings an object too', () => {
    expect(refusal(() => resolveProxyOptions('x' as never)).message).toBe(
      'createProxy expects an options object, got "x"',
    );
    expect(refusal(() => resolveHandlerOptions(null as never)).message).toBe(
      'createHandler expects an options object, got null',
    );
    expect(problemsOf(() => resolveProxyOptions({ ...base, routing: null as never }))).toEqual([
      'The option "routing" of createProxy: routing must be an object of settings',
    ]);
  });

  it('a setting only disagg serve takes is refused by createProxy as unknown, and its value is not read', () => {
    expect(problemsOf(() => resolveProxyOptions({ ...base, port: 'x' } as never))).toEqual([
      expect.stringMatching(/^Unknown option "port" of createProxy/),
    ]);
  });

  it('a null tracer or metrics registry is refused by name, not crashed on', () => {
    expect(refusal(() => resolveProxyOptions({ ...base, tracer: null as never })).message).toBe(
      'tracer must be an OpenTelemetry tracer, got null',
    );
    expect(refusal(() => resolveProxyOptions({ ...base, metricsRegistry: null as never })).message).toBe(
      'metricsRegistry must be a prom-client Registry, got null',
    );
  });

  it('aggregating by cache works with precise-prefix on decode as with cache-aware', () => {
    const options = resolveProxyOptions({
      ...base,
      decodePolicy: 'precise-prefix',
      kvEvents: { port: 5557 },
      routing: { aggregateCachedRatio: 0.5 },
    });
    expect(options.routing.aggregateCachedRatio).toBe(0.5);
  });

  it('a pool found by a label selector alone needs no worker URL', () => {
    const config = served(['--connector', 'vllm', '--prefill-selector', 'app=prefill', '--decode', 'http://d']);
    expect(config.prefill).toEqual([]);
    expect(config.discovery?.prefillSelector).toBe('app=prefill');
  });

  it('a header name is a string of token characters', () => {
    expect(problemsOf(() => resolveProxyOptions({ ...base, routing: { sessionHeader: 5 as never } }))).toEqual([
      'routing.sessionHeader must be an HTTP header name, got 5',
    ]);
  });

  it('--otlp-endpoint takes plain http too; --redis-url redis:// too, and nothing before the scheme', () => {
    expect(served([...workers, '--otlp-endpoint', 'http://collector:4318']).tracing?.otlpEndpoint).toBe(
      'http://collector:4318',
    );
    expect(served([...workers, '--redis-url', 'redis://redis:6379']).redisUrl).toBe('redis://redis:6379');
    expect(problemsOf(() => loadServeConfig([...workers, '--redis-url', 'myredis://r'], {}))).toEqual([
      '--redis-url must be a redis:// or rediss:// URL, got "myredis://r"',
    ]);
    const numeric = file('redis.yaml', 'connector: vllm\nprefill: [http://p]\ndecode: [http://d]\nredisUrl: 5\n');
    expect(problemsOf(() => loadServeConfig(['--config', numeric], {}))).toEqual([
      `redisUrl in ${numeric} must be a non-empty string, got 5`,
    ]);
  });

  it('several problems are listed one per line under their count', () => {
    expect(refusal(() => loadServeConfig([...workers, '--prefix-weight', '0', '--redis-url', 'x'], {})).message).toBe(
      [
        '2 problems:',
        '  - --prefix-weight (routing.prefixWeight) takes a number above 0, got "0"',
        '  - --redis-url must be a redis:// or rediss:// URL, got "x"',
      ].join('\n'),
    );
  });
});
