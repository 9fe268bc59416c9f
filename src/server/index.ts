// The `disagg/server` subpath: the OpenAI-compatible disaggregating proxy that `disagg serve`
// runs, to embed in your own process.

export type { SglangPrefillWorkerFields } from '../engines/sglang/worker-fields.js';
// The routing plugins' registration, beside the proxy whose settings then name them.
export type { DeciderPlugin, DeciderServices } from '../routing/decider-plugins.js';
export type { FilterPlugin } from '../routing/filter-plugins.js';
export type { PickerPlugin } from '../routing/picker-plugins.js';
export {
  PluginNameTakenError,
  registerDecider,
  registerFilter,
  registerPicker,
  registerScorer,
} from '../routing/plugin-registration.js';
export type { PluginParam, ScorerPlugin } from '../routing/plugins.js';
export { type AnswerOptions, answerFetch, answerNode, type RunRequest } from './answer-request.js';
export { loadServeConfig } from './config.js';
export { ConfigError } from './config-error.js';
export type { EngineHook, PolicyOption } from './custom-parts.js';
export {
  classifyFailure,
  defaultRetries,
  FAILURE_RULES,
  type FailureClass,
  type FailureRule,
  RETRY_DEFAULTS,
  type RetryOptions,
} from './fleet/failure-rules.js';
export { BREAKER_DEFAULTS, HEALTH_DEFAULTS, type ProbeFailure } from './fleet/health.js';
export { type FollowedPool, KvFollower, type KvFollowerOptions, type KvWorker } from './fleet/kv-following.js';
export { type WatchHealthOptions, type WorkerHealth, watchHealth } from './fleet/watch-health.js';
export type { TracerLike } from './observability/tracing.js';
export type { Route } from './openai-format.js';
export type { PreemptedError } from './pipeline/admission.js';
export { type ErrorAnswer, errorToResponse } from './pipeline/error-answers.js';
export type { Exchange, RequestHeaders } from './pipeline/exchange.js';
export type { RequestAnswer, RequestVariables, ResolvedModel } from './pipeline/request-context.js';
export { type ModelLimits, validateRequest } from './pipeline/request-schemas.js';
export type { Stage, StageOutcome, StageRequest } from './pipeline/stage.js';
export { createProxy, type ProxyServer } from './proxy.js';
export {
  jsonResponse,
  type RelayedResponse,
  type RelayOptions,
  type RelayResult,
  type RelaySource,
  sseResponse,
  writeJson,
  writeSse,
} from './relay.js';
export type { ProxyPoolOption, ResolvedPool } from './settings/pool-entries.js';
export type { HandlerOptions, ProxyOptions } from './settings/proxy-options.js';
export type { ProxyRewriteOption, RewriteTarget } from './settings/rewrite-entries.js';
export type { ServeConfig } from './settings/types.js';
export type { ProxyDecodeWorker, ProxyPrefillWorker } from './settings/worker-entries.js';
export { createHandler, type DisaggHandler } from './web-handler.js';
