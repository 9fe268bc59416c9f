#!/usr/bin/env node
// The `disagg` command. The only module that writes to the console: a command-line tool.
import { setFlagsFromString } from 'node:v8';
import { ConfigError, loadServeConfig, SERVE_USAGE, type ServeConfig } from '../server/config.js';
import { createProxy } from '../server/proxy.js';
import type { ProxyCore } from '../server/proxy-core.js';
import { packageVersion } from '../util/package-version.js';
import { startOtlpTracing } from './otlp-tracing.js';
import {
  configProblems,
  createLogger,
  discoveryOf,
  dropUndefined,
  runsWith,
  settingProblems,
  startupFailure,
} from './serve-parts.js';

const USAGE = `Usage: disagg <command>

Commands:
  serve         run the OpenAI-compatible disaggregating proxy (disagg serve --help)
  sidecar       run on a decode pod behind a Gateway API endpoint picker: prefill where its
                x-prefiller-host-port header says, then decode locally (disagg sidecar --help)
  epp           run a Gateway API endpoint picker (Envoy ext_proc) over disagg's scheduling
                (disagg epp --help)
  fake-workers  start fake prefill and decode workers to try it without a GPU (--help)
  simulate      replay a trace or workload on a simulated fleet that keeps time, under disagg
                serve's routing or a baseline's: TTFT, ITL, goodput (disagg simulate --help)
  plan          the prefill and decode workers a workload needs to meet its service levels,
                found by simulation within a GPU budget (disagg plan --help)
  tokenizer     fetch a Hugging Face model's tokenizer into the cache ahead of time
                (disagg tokenizer fetch Qwen/Qwen3-8B; --help)

Options:
  --version  print the version
`;

async function main(argv: string[]): Promise<number> {
  const [command, ...rest] = argv;
  if (command === '--version' || command === '-v') {
    console.log(packageVersion());
    return 0;
  }
  // The fakes (workers, a Kubernetes API) load only for their command: a proxy does not carry them.
  if (command === 'fake-workers') return (await import('./fake-workers-command.js')).fakeWorkers(rest);
  if (command === 'plan') return (await import('./plan-command.js')).plan(rest);
  if (command === 'simulate') return (await import('./simulate-command.js')).simulate(rest);
  if (command === 'epp') return (await import('./epp-command.js')).epp(rest);
  if (command === 'tokenizer') return (await import('./tokenizer-command.js')).tokenizerCommand(rest);
  if (command !== 'serve' && command !== 'sidecar') {
    if (command === undefined || command === '--help' || command === '-h') {
      console.log(USAGE);
      return 0;
    }
    console.error(`disagg: unknown command ${JSON.stringify(command)}\n\n${USAGE}`);
    return 2;
  }
  let config: ReturnType<typeof loadServeConfig>;
  try {
    // A sidecar is the proxy with each request's prefill worker named by its header.
    config = loadServeConfig(command === 'sidecar' ? ['--prefill-from', 'header', ...rest] : rest);
    if (config !== 'help' && command === 'sidecar' && config.sidecar.prefillFrom !== 'header') {
      throw new ConfigError('disagg sidecar takes each prefill worker from the request: drop --prefill-from');
    }
  } catch (error) {
    const problems = settingProblems(error);
    if (problems === undefined) throw error;
    return configProblems(problems, command);
  }
  if (config === 'help') {
    console.log(command === 'sidecar' ? `${SIDECAR_USAGE}\n${SERVE_USAGE}` : SERVE_USAGE);
    return 0;
  }
  try {
    await serve(config, command);
  } catch (error) {
    // A combination only the proxy's checks see (a policy and the data it reads), a tenants
    // file or a tokenizer directory that does not load: the same lines as a bad flag.
    const problems = settingProblems(error);
    if (problems !== undefined) return configProblems(problems, command);
    const line = startupFailure(error, `${config.host}:${config.port}`, command);
    if (line === undefined) throw error;
    console.error(`disagg ${command}: ${line}`);
    return 1;
  }
  return 0;
}

const SIDECAR_USAGE = `disagg sidecar: the decode pod's side of the Gateway API's P/D protocol (llm-d's routing
sidecar). An endpoint picker sent the request to this pod and named its prefill worker in
x-prefiller-host-port: the sidecar checks it against --prefill-allow (and the prefill workers
given or discovered), runs the prefill leg there and decodes on --decode. A request without the
header is served by --decode alone; a prefill worker outside the allow-list is a 403.

  disagg sidecar --decode http://127.0.0.1:8200 --port 8000 --prefill-allow 10.0.0.0/8 --connector vllm

It takes every setting of disagg serve (--prefill-from is set to header):
`;

/**
 * Runs the proxy until SIGTERM or SIGINT, then stops it within its grace period, and then the
 * span exporter (its buffered spans sent, for 5 s at most).
 */
async function serve(config: ServeConfig, command: string): Promise<void> {
  const logger = await createLogger(config);
  // Everything but where and how the process runs is an option of the proxy (one table of both).
  const { host: _host, port: _port, logLevel: _level, logFormat: _format, tracing: traceConfig, ...settings } = config;
  const tracing =
    traceConfig.otlpEndpoint === undefined
      ? undefined
      : await startOtlpTracing({
          endpoint: traceConfig.otlpEndpoint,
          sampleRatio: traceConfig.sampleRatio,
          serviceName: traceConfig.serviceName,
          logger,
        });
  const proxy = createProxy({
    ...dropUndefined(settings),
    logger,
    ...(tracing === undefined ? {} : { tracer: tracing.tracer }),
  });
  const url = await proxy.listen(config.port, config.host);
  logger.info(
    {
      url,
      connector: config.connector,
      // The workers in the pools now: those listed and those discovery found before listening.
      prefill: proxy.prefillWorkers.workers.map((w) => w.url),
      decode: proxy.decodeWorkers.workers.map((w) => w.url),
      ...discoveryOf(config),
      // The proxy's core is internal to the library's API; the command is the library's own.
      ...runsWith((proxy as unknown as { core: ProxyCore }).core),
      ...(config.sidecar.prefillFrom === 'header' ? { prefillAllow: config.sidecar.prefillAllow } : {}),
      admin: config.adminKey !== undefined,
      metrics: proxy.metricsUrl === undefined ? `${url}/metrics` : `${proxy.metricsUrl}/metrics`,
      ...(tracing === undefined ? {} : { traces: tracing.url }),
    },
    `disagg ${command} listening`,
  );
  await new Promise<void>((resolve) => {
    const stop = (signal: NodeJS.Signals) => {
      logger.info({ signal, gracePeriodMs: config.gracePeriodMs }, 'Shutting down');
      process.off('SIGTERM', stop);
      process.off('SIGINT', stop);
      proxy.close().then(resolve, resolve);
    };
    process.on('SIGTERM', stop);
    process.on('SIGINT', stop);
  });
  // After the proxy: the spans of the requests it ended go out too.
  await tracing?.shutdown();
  logger.info('Stopped');
}

// undici parses HTTP with llhttp compiled to WebAssembly, and V8's optimizing tier compiles its
// one large state-machine function with 25-40 MB of compiler memory that the allocator keeps
// afterwards. Measured on this project's machine, an idle `disagg serve` peaked at 101 MB and
// settled at 66-76 MB on Node 20; with WebAssembly left to the baseline compiler, 66.5 MB flat,
// and a client parsing 160,000 streamed events spent the same CPU within noise. V8 reads the
// flag after start on Node 20 only; the image passes it to node, as Node 24 needs (92 -> 83 MB
// idle there). Only the command sets it: the process is its own, while the library leaves V8's
// flags to whoever embeds it (docs/performance.md, `disagg serve`, the paragraph on memory).
setFlagsFromString('--liftoff-only');
// A proxy's old generation is mostly garbage between full collections: what a stream holds
// while it lasts is promoted, then dies with it. With V8's own growing factor the old
// generation reached 50 MB for about 12 MB live at 50 streams in flight; grown by half at most
// (V8 still adds 8 MB at least) it peaks at about 22 MB: a resident set of 86 against 114 to
// 122 MB, for the same CPU per request within noise (A/B here, alternating rounds, closed loop
// and 150 requests a second). Read at every collection, so set here it holds on Node 20 and 24.
setFlagsFromString('--heap-growing-percent=50');

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (error: unknown) => {
    console.error(error);
    process.exitCode = 1;
  },
);
