// The `disagg/server` subpath: the OpenAI-compatible disaggregating proxy that `disagg serve`
// runs, to embed in your own process.
export { ConfigError, loadServeConfig, type ServeConfig } from './config.js';
export {
  createProxy,
  type ProxyDecodeWorker,
  type ProxyOptions,
  type ProxyPrefillWorker,
  type ProxyServer,
} from './proxy.js';
