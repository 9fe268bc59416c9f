// `disagg epp`: the endpoint picker as a command. Its settings are `disagg serve`'s (workers,
// selectors, policies, KV events, tenants, a config file), its ports its own.
import { parseArgs } from 'node:util';
import { EPP_DEFAULTS, EppUnavailableError, startEndpointPicker } from '../epp/epp-server.js';
import { ConfigError, loadServeConfig, SERVE_USAGE } from '../server/config.js';
import {
  configProblems,
  createLogger,
  discoveryOf,
  dropUndefined,
  runsWith,
  settingProblems,
  startupFailure,
} from './serve-parts.js';

const EPP_USAGE = `disagg epp: a Gateway API endpoint picker (the Inference Extension's protocol, Envoy's ext_proc
in FULL_DUPLEX_STREAMED mode). For each request the gateway asks which pod serves it: the decode
pod as x-gateway-destination-endpoint (and envoy.lb metadata), its prefill pod as
x-prefiller-host-port for the pod's sidecar (disagg sidecar, or llm-d's), chosen by the pools'
policies (precise prefix on KV events, load, sessions), within the gateway's subset hint. A bad
request, a tenant over its limits or full admission, no pod in rotation: answered by the picker
(400, 429, 503 with x-llm-d-request-dropped-reason).

  disagg epp --connector vllm --prefill-selector app=prefill --decode-selector app=decode

Its own settings:
  --port N            the ext_proc service (gRPC, plain HTTP/2) [default: ${EPP_DEFAULTS.port}]
  --health-port N     gRPC health: liveness, readiness, envoy.service.ext_proc.v3.ExternalProcessor
                      [default: ${EPP_DEFAULTS.healthPort}] (env: DISAGG_HEALTH_PORT)
  --metrics-port N    Prometheus /metrics over HTTP [default: ${EPP_DEFAULTS.metricsPort}]
  --host ADDRESS      where all three listen [default: 0.0.0.0]

It takes the workers, routing, KV-event, tenant and discovery settings of disagg serve (the
relay's own, such as deadlines and migration, are the sidecar's business):
`;

/** Runs `disagg epp` until SIGTERM or SIGINT; resolves with the exit status. */
export async function epp(args: string[], env: NodeJS.ProcessEnv = process.env): Promise<number> {
  let own: { healthPort: number; rest: string[] };
  let config: ReturnType<typeof loadServeConfig>;
  try {
    own = ownFlags(args, env);
    // The picker's ports by default, not the proxy's.
    const defaults = [
      ...(given(own.rest, 'port') || env.DISAGG_PORT !== undefined ? [] : ['--port', String(EPP_DEFAULTS.port)]),
      ...(given(own.rest, 'host') || env.DISAGG_HOST !== undefined ? [] : ['--host', '0.0.0.0']),
      ...(given(own.rest, 'metrics-port') || env.DISAGG_METRICS_PORT !== undefined
        ? []
        : ['--metrics-port', String(EPP_DEFAULTS.metricsPort)]),
    ];
    config = loadServeConfig([...defaults, ...own.rest], env);
    if (config !== 'help' && config.sidecar.prefillFrom === 'header') {
      throw new ConfigError(
        "--prefill-from header is a sidecar's (disagg sidecar): an endpoint picker names the prefill pod itself",
      );
    }
  } catch (error) {
    const problems = settingProblems(error);
    if (problems === undefined) throw error;
    return configProblems(problems, 'epp');
  }
  if (config === 'help') {
    console.log(`${EPP_USAGE}\n${SERVE_USAGE}`);
    return 0;
  }
  const logger = await createLogger(config);
  const { host, port, logLevel: _level, logFormat: _format, tracing: _tracing, metricsPort, ...settings } = config;
  let picker: Awaited<ReturnType<typeof startEndpointPicker>>;
  try {
    picker = await startEndpointPicker(
      { ...dropUndefined(settings), logger },
      { port, healthPort: own.healthPort, metricsPort, host },
    );
  } catch (error) {
    const problems = settingProblems(error);
    if (problems !== undefined) return configProblems(problems, 'epp');
    const line = EppUnavailableError.is(error)
      ? error.message
      : startupFailure(error, `${host}:${port}, ${own.healthPort} or ${metricsPort}`, 'epp');
    if (line === undefined) throw error;
    console.error(`disagg epp: ${line}`);
    return 1;
  }
  logger.info(
    {
      extProc: `${host}:${picker.ports.extProc}`,
      health: `${host}:${picker.ports.health}`,
      metrics: `http://${host}:${picker.ports.metrics}/metrics`,
      connector: config.connector,
      prefill: picker.core.pools.workers('prefill').map((worker) => worker.url),
      decode: picker.core.pools.workers('decode').map((worker) => worker.url),
      ...discoveryOf(config),
      ...runsWith(picker.core),
    },
    'disagg epp listening',
  );
  await new Promise<void>((resolve) => {
    const stop = (signal: NodeJS.Signals) => {
      logger.info({ signal, drainDelayMs: config.drainDelayMs, gracePeriodMs: config.gracePeriodMs }, 'Shutting down');
      process.off('SIGTERM', stop);
      process.off('SIGINT', stop);
      picker.close().then(resolve, resolve);
    };
    process.on('SIGTERM', stop);
    process.on('SIGINT', stop);
  });
  logger.info('Stopped');
  return 0;
}

/** `--health-port` (the picker's alone) taken out of `args`; the rest for the proxy's settings. */
function ownFlags(args: string[], env: NodeJS.ProcessEnv): { healthPort: number; rest: string[] } {
  const rest: string[] = [];
  let text: string | undefined = env.DISAGG_HEALTH_PORT;
  for (let i = 0; i < args.length; i++) {
    const arg = args[i] as string;
    if (arg === '--health-port') {
      text = args[++i];
      if (text === undefined) throw new ConfigError('--health-port needs a port number');
    } else if (arg.startsWith('--health-port=')) text = arg.slice('--health-port='.length);
    else rest.push(arg);
  }
  if (text === undefined) return { healthPort: EPP_DEFAULTS.healthPort, rest };
  const healthPort = Number(text);
  if (!/^\d+$/.test(text) || healthPort > 65535) {
    throw new ConfigError(`--health-port must be a port number (0 to 65535), got ${JSON.stringify(text)}`);
  }
  return { healthPort, rest };
}

/** Whether `args` gives `--name` (as `--name V` or `--name=V`). */
function given(args: string[], name: string): boolean {
  const { tokens } = parseArgs({ args, strict: false, allowPositionals: true, tokens: true });
  return tokens.some((token) => token.kind === 'option' && token.name === name);
}
