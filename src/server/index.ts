// The `disagg/server` subpath: the OpenAI-compatible disaggregating proxy that `disagg serve`
// runs, to embed in your own process.
export { loadServeConfig } from './config.js';
export {
  ConfigError,
  type HandlerOptions,
  type ProxyDecodeWorker,
  type ProxyOptions,
  type ProxyPrefillWorker,
  type ServeConfig,
} from './options.js';
export { createProxy, type ProxyServer } from './proxy.js';
export type { TracerLike } from './tracing.js';
export { createHandler, type DisaggHandler } from './web-handler.js';
