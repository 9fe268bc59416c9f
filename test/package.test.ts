import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import { beforeAll, describe, expect, it } from 'vitest';

const root = fileURLToPath(new URL('..', import.meta.url));
const EXPORTS = [
  'AgentStoreQuotaError',
  'AgentStoreUnavailableError',
  'Annotated',
  'AnnotatedError',
  'BOOTSTRAP_PORT_ANNOTATION',
  'BlockKeys',
  'CACHE_AWARE_DEFAULTS',
  'CACHE_KNOWING_POLICIES',
  'CleanupError',
  'Controller',
  'DECIDERS',
  'DECIDER_NAMES',
  'DEFAULT_CLEANUP_BUDGET_MS',
  'DEFAULT_DEADLINES',
  'DEFAULT_PICKER',
  'DEFAULT_SCORERS',
  'DeadlineError',
  'DisaggError',
  'DiscoveryUnavailableError',
  'DnsDiscovery',
  'ENDPOINTS',
  'FILTERS',
  'FILTER_NAMES',
  'FinishReason',
  'HANDOFF_FIELDS',
  'HandoffFieldError',
  'KV_EVENTS_PORT_ANNOTATION',
  'KV_EVENTS_REPLAY_PORT_ANNOTATION',
  'KubernetesDiscovery',
  'KvBlockIndex',
  'KvEventFormatError',
  'KvEventSubscriber',
  'KvEventsUnavailableError',
  'KvSilenceWatch',
  'LEG_ORDER',
  'LLMEngineOutput',
  'LatencyPredictor',
  'MAX_BOOTSTRAP_ROOM',
  'MEMORY_STORE_BOUNDS',
  'MemoryAgentStore',
  'NoWorkerError',
  'OnlineRidge',
  'PICKERS',
  'PICKER_NAMES',
  'POLICIES',
  'POLICY_NAMES',
  'PluginNameTakenError',
  'PostgresAgentStore',
  'PostgresStoreSettingError',
  'PrefillError',
  'PrefillTask',
  'PrefixTree',
  'RELEASE_MODEL',
  'ROUTING_DATA',
  'RedisAgentStore',
  'RedisSessionBindings',
  'ResponseStream',
  'RoutingInput',
  'SCORERS',
  'SCORER_NAMES',
  'SESSION_BINDING_TTL_MS',
  'SGLANG_LOAD_METRICS',
  'STORE_LIMITS',
  'SUSPECT_LOAD',
  'Scheduler',
  'SharedInFlight',
  'TokenizerError',
  'TokenizerPool',
  'UNPAIRED',
  'UnsupportedRequestError',
  'UnsupportedRouteError',
  'UpstreamError',
  'VLLM_LOAD_METRICS',
  'WORKER_ATTRIBUTES',
  'WORKER_PORTS_ANNOTATION',
  'WorkerPool',
  'attributeOf',
  'branded',
  'budgetOf',
  'cacheAware',
  'classifyPrefill',
  'consistentHash',
  'createPolicy',
  'deciderPlugin',
  'decidersConsume',
  'decidersFrom',
  'decidersOf',
  'decodeKvEventBatch',
  'decodeRequest',
  'disaggregate',
  'earlyBootstrap',
  'endpointNamed',
  'endpointOf',
  'engineQueueScorer',
  'failedLeg',
  'filterPlugin',
  'findTokenizer',
  'httpEngine',
  'isEndpointName',
  'kvPrefixScorer',
  'kvUsageScorer',
  'leastInFlight',
  'loadBlockKeys',
  'loadScorer',
  'lowKvUsageFilter',
  'lowQueueFilter',
  'maxScorePicker',
  'mergeConsumption',
  'mintBootstrapRoom',
  'openAgentStore',
  'orphanedHandoffs',
  'parseJson',
  'pickerPlugin',
  'pluginNamed',
  'policyConsumes',
  'powerOfTwo',
  'precisePrefix',
  'prefillRequest',
  'prefixScorer',
  'promptSideOf',
  'promptSideWith',
  'random',
  'readDeciders',
  'readEngineLoad',
  'readFilters',
  'readParams',
  'readPicker',
  'readPluginEntry',
  'readScorers',
  'reconcile',
  'refuseEchoOfIds',
  'refusePromptSide',
  'registerDecider',
  'registerFilter',
  'registerPicker',
  'registerScorer',
  'roundRobin',
  'routingText',
  'sameLabelFilter',
  'sanitizeClientRequest',
  'scoredFrom',
  'scoredPolicy',
  'scorerPlugin',
  'scorersConsume',
  'sessionAffinity',
  'sglangBootstrap',
  'sloFeasibleFilter',
  'sloHeadroomScorer',
  'stringifyJson',
  'tokenizerSpec',
  'trtllmContextFirst',
  'vllmNixl',
  'weightedRandomPicker',
  'withDefaults',
  'workerRedactor',
];

describe('the built package, as a router imports it', () => {
  beforeAll(() => {
    if (!existsSync(`${root}/dist/index.js`) || !existsSync(`${root}/dist/index.cjs`)) {
      throw new Error('dist/ is missing: run `npm run build` first (`npm test` does)');
    }
  });

  it('require("disagg") gives every export by name (CommonJS)', () => {
    const cjs = createRequire(`${root}/package.json`)('disagg');
    expect(Object.keys(cjs).sort()).toEqual(EXPORTS);
  });

  it('the optional dependencies load only when asked: neither with the root, no Kubernetes client with disagg/server', () => {
    const loaded = (entry: string) => {
      const script = `
        require(${JSON.stringify(entry)});
        const paths = Object.keys(require.cache);
        console.log(JSON.stringify(['@kubernetes', '@opentelemetry'].filter((name) => paths.some((path) => path.includes(name)))));
      `;
      const run = spawnSync(process.execPath, ['-e', script], { cwd: root, encoding: 'utf8' });
      expect(run.stderr).toBe('');
      return JSON.parse(run.stdout) as string[];
    };
    expect(loaded('disagg')).toEqual([]);
    // (prom-client, which the proxy's metrics use, loads @opentelemetry/api itself when it is installed.)
    expect(loaded('disagg/server')).not.toContain('@kubernetes');
  });

  it("the bin's bundle, built without keepNames, renames no class of the library for a clash (logs name an error by its class)", () => {
    const written = new Set(
      [...readdirSync(`${root}/src`, { recursive: true, encoding: 'utf8' })]
        .filter((file) => file.endsWith('.ts'))
        .flatMap((file) =>
          [...readFileSync(`${root}/src/${file}`, 'utf8').matchAll(/\bclass (\w+)/g)].map((m) => m[1]),
        ),
    );
    // The bin and the chunks it loads (code it shares with a command loaded on demand, such as
    // `disagg epp`, sits in a chunk of its own).
    const files = new Set(['cli.js']);
    for (const file of files) {
      for (const [, chunk] of readFileSync(`${root}/dist/${file}`, 'utf8').matchAll(/from "\.\/(chunk-\w+\.js)"/g)) {
        files.add(chunk as string);
      }
    }
    const bundled = [...files].flatMap((file) =>
      [...readFileSync(`${root}/dist/${file}`, 'utf8').matchAll(/\bvar ([\w$]+) = class\b/g)].map(
        (m) => m[1] as string,
      ),
    );
    expect(bundled).toContain('UpstreamError');
    const renamed = bundled.filter((name) => !written.has(name) && written.has(name.replace(/\d+$/, '')));
    expect(renamed).toEqual([]);
  });

  it('every class keeps the name it is written with, in both formats (logs name an error by its class)', () => {
    const cjs = createRequire(`${root}/package.json`)('disagg');
    const classes = EXPORTS.filter((name) => /^[A-Z][a-z]/.test(name) && typeof cjs[name] === 'function');
    expect(classes.length).toBeGreaterThan(10);
    for (const name of classes) expect(cjs[name].name).toBe(name);
    const script = `
      import * as esm from 'disagg';
      console.log(JSON.stringify(${JSON.stringify(classes)}.filter((name) => esm[name].name !== name)));
    `;
    const run = spawnSync(process.execPath, ['--input-type=module', '-e', script], { cwd: root, encoding: 'utf8' });
    expect(JSON.parse(run.stdout)).toEqual([]);
  });

  it('import("disagg") gives every export by name (ESM), and errors branded in one copy are recognised by the other', () => {
    const script = `
      import * as esm from 'disagg';
      import { createRequire } from 'node:module';
      const cjs = createRequire(import.meta.url)('disagg');
      const fromCjs = new cjs.PrefillError('prefill', 'x');
      console.log(JSON.stringify({
        names: Object.keys(esm).sort(),
        sameClass: esm.PrefillError === cjs.PrefillError,
        recognised: esm.PrefillError.is(fromCjs),
      }));
    `;
    const run = spawnSync(process.execPath, ['--input-type=module', '-e', script], { cwd: root, encoding: 'utf8' });
    expect(run.stderr).toBe('');
    expect(JSON.parse(run.stdout)).toEqual({ names: EXPORTS, sameClass: false, recognised: true });
  });

  it('a whole handoff runs from the CommonJS build', async () => {
    const { PrefillTask, Controller, ResponseStream, Annotated, LLMEngineOutput } = createRequire(
      `${root}/package.json`,
    )('disagg');
    async function* decode() {
      yield Annotated.fromData({ token_ids: [1] });
      yield Annotated.fromData(LLMEngineOutput.length());
    }
    const context = new Controller('cjs');
    const task = PrefillTask.spawn(Promise.resolve());
    const stream = await task.forwardDecode(Promise.resolve(new ResponseStream(decode(), context)), context);
    const items = [];
    for await (const item of stream) items.push(item);
    expect(items.map((item) => item.data.finish_reason ?? null)).toEqual([null, 'length']);
  });
});

describe('the disagg/rxjs subpath, as a router imports it', () => {
  it('both formats give toObservable, fromObservable and flowEvents, sharing the root copy of the library', () => {
    const script = `
      import * as esm from 'disagg/rxjs';
      import * as root from 'disagg';
      import { createRequire } from 'node:module';
      import { of } from 'rxjs';
      const require = createRequire(import.meta.url);
      const cjs = require('disagg/rxjs');
      console.log(JSON.stringify({
        esm: Object.keys(esm).sort(),
        cjs: Object.keys(cjs).sort(),
        sharedEsm: esm.fromObservable(of(1), new root.Controller()) instanceof root.ResponseStream,
        sharedCjs: cjs.fromObservable(of(1), new (require('disagg').Controller)()) instanceof require('disagg').ResponseStream,
      }));
    `;
    const run = spawnSync(process.execPath, ['--input-type=module', '-e', script], { cwd: root, encoding: 'utf8' });
    expect(run.stderr).toBe('');
    const names = ['flowEvents', 'fromObservable', 'toObservable'];
    expect(JSON.parse(run.stdout)).toEqual({ esm: names, cjs: names, sharedEsm: true, sharedCjs: true });
  });
});

describe('the disagg/testing subpath', () => {
  it('both formats start a fake worker that answers on loopback', () => {
    const script = `
      import * as esm from 'disagg/testing';
      import { createRequire } from 'node:module';
      const cjs = createRequire(import.meta.url)('disagg/testing');
      const worker = await cjs.startFakeWorker({ role: 'decode', protocol: 'vllm' });
      const health = await fetch(worker.url + '/health').then((r) => r.json());
      await worker.close();
      console.log(JSON.stringify({ esm: Object.keys(esm).sort(), cjs: Object.keys(cjs).sort(), health }));
    `;
    const run = spawnSync(process.execPath, ['--input-type=module', '-e', script], { cwd: root, encoding: 'utf8' });
    expect(run.stderr).toBe('');
    const names = [
      'DEFAULT_PROFILE',
      'FakeKvCache',
      'FakeKvPublisher',
      'FakePrefixCache',
      'FakeSimulation',
      'KvLedger',
      'KvTree',
      'PROFILES',
      'ProfileError',
      'RealtimeClock',
      'SimEngine',
      'TRACE_BLOCK_TOKENS',
      'TokenPace',
      'TraceFormatError',
      'UnknownWorkloadError',
      'VirtualClock',
      'WORKLOADS',
      'checkProfile',
      'contextLimit',
      'cpuLoadMs',
      'decodeStepMs',
      'decodeThroughput',
      'fakeKubeconfig',
      'findProfile',
      'parseTrace',
      'parseTraceLine',
      'prefillMs',
      'profileSummary',
      'readProfile',
      'readTrace',
      'replay',
      'scaleRate',
      'startFakeKubernetesApi',
      'startFakeWorker',
      'summarizeTrace',
      'tokenBlocks',
      'transferMs',
      'workload',
    ];
    expect(JSON.parse(run.stdout)).toEqual({ esm: names, cjs: names, health: { status: 'ok' } });
  });
});

describe('the disagg/server subpath', () => {
  it('both formats give createProxy, createHandler, the configuration loader, the relay pieces, health and retries', () => {
    const script = `
      import * as esm from 'disagg/server';
      import { createRequire } from 'node:module';
      const cjs = createRequire(import.meta.url)('disagg/server');
      console.log(JSON.stringify({ esm: Object.keys(esm).sort(), cjs: Object.keys(cjs).sort() }));
    `;
    const run = spawnSync(process.execPath, ['--input-type=module', '-e', script], { cwd: root, encoding: 'utf8' });
    expect(run.stderr).toBe('');
    const names = [
      'BREAKER_DEFAULTS',
      'ConfigError',
      'FAILURE_RULES',
      'HEALTH_DEFAULTS',
      'KvFollower',
      'PluginNameTakenError',
      'RETRY_DEFAULTS',
      'answerFetch',
      'answerNode',
      'classifyFailure',
      'createHandler',
      'createProxy',
      'defaultRetries',
      'errorToResponse',
      'jsonResponse',
      'loadServeConfig',
      'registerDecider',
      'registerFilter',
      'registerPicker',
      'registerScorer',
      'sseResponse',
      'validateRequest',
      'watchHealth',
      'writeJson',
      'writeSse',
    ];
    expect(JSON.parse(run.stdout)).toEqual({ esm: names, cjs: names });
  });
});

describe('the disagg/fastify subpath', () => {
  it('both formats give the plugin; fastify and Hono load only through it (neither the root nor disagg/server loads them)', () => {
    const script = `
      import * as esm from 'disagg/fastify';
      import { createRequire } from 'node:module';
      const cjs = createRequire(import.meta.url)('disagg/fastify');
      console.log(JSON.stringify({ esm: Object.keys(esm).sort(), cjs: Object.keys(cjs).sort() }));
    `;
    const run = spawnSync(process.execPath, ['--input-type=module', '-e', script], { cwd: root, encoding: 'utf8' });
    expect(run.stderr).toBe('');
    expect(JSON.parse(run.stdout)).toEqual({ esm: ['disaggPlugin'], cjs: ['disaggPlugin'] });
    const loaded = spawnSync(
      process.execPath,
      [
        '-e',
        `require('disagg'); require('disagg/server');
         console.log(JSON.stringify(Object.keys(require.cache).filter((path) => /node_modules[\\/](fastify|hono|@hono)[\\/]/.test(path))));`,
      ],
      { cwd: root, encoding: 'utf8' },
    );
    expect(loaded.stderr).toBe('');
    expect(JSON.parse(loaded.stdout)).toEqual([]);
  });
});

describe('the API reference', () => {
  it('documents every subpath the package exports (npm run docs builds from these entry points)', () => {
    const exports = Object.keys(JSON.parse(readFileSync(`${root}/package.json`, 'utf8')).exports).filter(
      (path) => path !== './package.json',
    );
    const entries = JSON.parse(readFileSync(`${root}/typedoc.json`, 'utf8')).entryPoints as string[];
    const expected = exports.map((path) => (path === '.' ? 'src/index.ts' : `src/${path.slice(2)}/index.ts`));
    expect([...entries].sort()).toEqual(expected.sort());
  });
});

describe('installing before publication', () => {
  it('a git install or a pack builds the package (prepare), so that the bin and the library are there', () => {
    const scripts = JSON.parse(readFileSync(`${root}/package.json`, 'utf8')).scripts as Record<string, string>;
    expect(scripts.prepare).toMatch(/^tsup\b/);
    const pack = spawnSync('npm', ['pack', '--dry-run', '--json', '--ignore-scripts'], { cwd: root, encoding: 'utf8' });
    const files = (JSON.parse(pack.stdout) as Array<{ files: Array<{ path: string }> }>)[0]?.files.map((f) => f.path);
    expect(files).toEqual(expect.arrayContaining(['dist/cli.js', 'dist/index.js', 'dist/index.cjs', 'dist/server.js']));
  });
});
