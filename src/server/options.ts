// The settings live in ./settings/, one concern per module; this facade keeps the imports of
// before working (tests, and branches begun before the split).

export { POLICY_NAMES, type PolicyName } from '../routing/registry.js';
export { ConfigError } from './config-error.js';
export type { HandlerOptions, ProxyOptions } from './settings/proxy-options.js';
export { resolveHandlerOptions, resolveProxyOptions } from './settings/resolve.js';
export { SETTINGS, type SettingRowsMatch } from './settings/rows.js';
export { resolveServeConfig, type ServeSources } from './settings/serve-sources.js';
export type { Setting, SettingGroup } from './settings/setting.js';
export type { ResolvedProxyOptions, ServeConfig } from './settings/types.js';
export { serveUsage } from './settings/usage.js';
export type { KvEventEndpoints, ProxyDecodeWorker, ProxyPrefillWorker } from './settings/worker-entries.js';
export { checkWorker } from './settings/workers.js';
