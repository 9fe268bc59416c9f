// The package root: re-exports only. Layers: wire protocol, runtime, prefill handoff, flow,
// routing, discovery.

export {
  type AgentStore,
  type AgentStoreOptions,
  AgentStoreQuotaError,
  AgentStoreUnavailableError,
  type ItemsPage,
  type ItemsQuery,
  type JsonObject,
  type OwnerUsage,
  type ResponseChain,
  STORE_LIMITS,
  type StoredConversation,
  type StoredResponse,
  type StoreLimits,
} from './agent-state/agent-store.js';
export {
  MEMORY_STORE_BOUNDS,
  MemoryAgentStore,
  type MemoryAgentStoreOptions,
  type MemoryStoreStats,
} from './agent-state/memory-store.js';
export { type OpenAgentStoreOptions, openAgentStore } from './agent-state/open-store.js';
export { PostgresStoreSettingError } from './agent-state/postgres-schema.js';
export {
  PostgresAgentStore,
  type PostgresAgentStoreOptions,
  type SchemaMigration,
} from './agent-state/postgres-store.js';
export { RedisAgentStore, type RedisAgentStoreOptions } from './agent-state/redis-store.js';
export { DnsDiscovery, type DnsDiscoveryOptions, type Lookup } from './discovery/dns-discovery.js';
export {
  BOOTSTRAP_PORT_ANNOTATION,
  DiscoveryUnavailableError,
  KubernetesDiscovery,
  type KubernetesDiscoveryOptions,
  KV_EVENTS_PORT_ANNOTATION,
  KV_EVENTS_REPLAY_PORT_ANNOTATION,
  WORKER_PORTS_ANNOTATION,
} from './discovery/kubernetes-discovery.js';
export {
  type DiscoveredWorker,
  type DiscoveryRole,
  type MembershipTarget,
  reconcile,
} from './discovery/worker-set.js';
export {
  type AnswerShape,
  budgetOf,
  ENDPOINTS,
  type Endpoint,
  type EndpointBody,
  type EndpointName,
  endpointNamed,
  endpointOf,
  type GenerationName,
  isEndpointName,
  type Misfit,
  type RegisteredEndpoint,
  type Serving,
} from './endpoints/index.js';
export { type PromptSideEngine, promptSideOf, refusePromptSide } from './engines/prompt-sides.js';
export { RELEASE_MODEL, sglangBootstrap, trtllmContextFirst, vllmNixl } from './engines/registry.js';
export {
  type BootstrapRoomOptions,
  MAX_BOOTSTRAP_ROOM,
  mintBootstrapRoom,
} from './flow/bootstrap-room.js';
export { failedLeg } from './flow/client-stream.js';
export {
  type Connector,
  earlyBootstrap,
  type Handoff,
} from './flow/connectors.js';
export { DEFAULT_DEADLINES, DeadlineError, type DeadlinePhase, type Deadlines } from './flow/deadlines.js';
export { CleanupError, DEFAULT_CLEANUP_BUDGET_MS, orphanedHandoffs } from './flow/decode-leg.js';
export { type DisaggregateOptions, disaggregate, type Engine, type PrefillWorker } from './flow/disaggregate.js';
export type {
  FlowEvent,
  FlowEventBase,
  FlowEventListener,
  FlowEventOf,
  Leg,
  Strategy,
} from './flow/events.js';
export {
  HANDOFF_FIELDS,
  HandoffFieldError,
  type SanitizeOptions,
  sanitizeClientRequest,
} from './flow/handoff-fields.js';
export type { MigrationOptions } from './flow/migration.js';
export { type BootstrapInfo, classifyPrefill, type PrefillResult } from './flow/prefill-stream.js';
export { type PromptParts, type PromptSide, promptSideWith, refuseEchoOfIds } from './flow/prompt-side.js';
export {
  decodeRequest,
  prefillRequest,
  type RequestBody,
  UnsupportedRequestError,
  UnsupportedRouteError,
} from './flow/request-shaping.js';
export { PrefillError, type PrefillErrorKind } from './handoff/prefill-error.js';
export {
  type DecodeDispatch,
  type DecodeStream,
  PrefillTask,
  type PrefillTaskOptions,
} from './handoff/prefill-task.js';
export { type HttpApi, type HttpEngineOptions, httpEngine } from './http/http-engine.js';
export { parseJson, stringifyJson } from './http/json.js';
export { UpstreamError, type UpstreamErrorKind } from './http/upstream-error.js';
export { type ApplyResult, KvBlockIndex, type KvBlockIndexOptions } from './kv/block-index.js';
export { BlockKeys, loadBlockKeys } from './kv/block-keys.js';
export {
  type BlockHandle,
  decodeKvEventBatch,
  type KvEvent,
  type KvEventBatch,
  KvEventFormatError,
} from './kv/kv-events.js';
export { type KvSilence, KvSilenceWatch, type KvSilenceWatchOptions } from './kv/kv-silence.js';
export {
  KvEventSubscriber,
  type KvEventSubscriberOptions,
  KvEventsUnavailableError,
  type KvSubscriberState,
  type KvSubscriberStats,
} from './kv/kv-subscriber.js';
export {
  Annotated,
  AnnotatedError,
  type AnnotatedErrorBody,
  type EngineItem,
  type WireChunk,
} from './protocol/annotated.js';
export {
  type EngineLoad,
  type EngineLoadMetrics,
  type LoraState,
  readEngineLoad,
} from './protocol/engines/load-metrics.js';
export { SGLANG_LOAD_METRICS } from './protocol/engines/sglang.js';
export { VLLM_LOAD_METRICS } from './protocol/engines/vllm.js';
export { FinishReason, type OpenAIFinishReason } from './protocol/finish-reason.js';
export { type CompletionUsage, LLMEngineOutput } from './protocol/llm-engine-output.js';
export {
  RedisSessionBindings,
  type RedisSessionBindingsOptions,
  SESSION_BINDING_TTL_MS,
} from './replicas/redis-session-bindings.js';
export { SharedInFlight, type SharedInFlightOptions, SUSPECT_LOAD } from './replicas/shared-in-flight.js';
export { CACHE_AWARE_DEFAULTS, type CacheAwareOptions, cacheAware } from './routing/cache-aware.js';
export { type ConsistentHashOptions, consistentHash } from './routing/consistent-hash.js';
export {
  DECIDER_NAMES,
  DECIDERS,
  type Decider,
  type DeciderConsumption,
  type DeciderPlugin,
  type DeciderServices,
  type DeciderSetting,
  type DeciderSettings,
  deciderPlugin,
  decidersConsume,
  decidersFrom,
  decidersOf,
  readDeciders,
} from './routing/decider-plugins.js';
export {
  FILTER_NAMES,
  FILTERS,
  type FilterPlugin,
  type FilterSetting,
  filterPlugin,
  readFilters,
} from './routing/filter-plugins.js';
export {
  type EngineLoadSource,
  engineQueueScorer,
  type KvIndexSource,
  type KvIndexView,
  kvPrefixScorer,
  kvUsageScorer,
  type PrecisePrefixOptions,
  precisePrefix,
} from './routing/kv-prefix.js';
export { leastInFlight } from './routing/least-in-flight.js';
export { lowKvUsageFilter, lowQueueFilter } from './routing/load-filters.js';
export { sameLabelFilter, UNPAIRED, type Unpaired } from './routing/pairing-filters.js';
export {
  DEFAULT_PICKER,
  PICKER_NAMES,
  PICKERS,
  type PickerPlugin,
  type PickerSetting,
  pickerPlugin,
  readPicker,
} from './routing/picker-plugins.js';
export {
  type AnyParam,
  type NamedPlugin,
  type ParamValue,
  type PluginKind,
  type PluginSetting,
  pluginNamed,
  type RoutingPlugin,
  readParams,
  readPluginEntry,
  type TextPluginParam,
  withDefaults,
} from './routing/plugin-params.js';
export {
  PluginNameTakenError,
  registerDecider,
  registerFilter,
  registerPicker,
  registerScorer,
} from './routing/plugin-registration.js';
export {
  DEFAULT_SCORERS,
  type PluginParam,
  readScorers,
  SCORER_NAMES,
  SCORERS,
  type ScoredParts,
  type ScorerPlugin,
  type ScorerSetting,
  scoredFrom,
  scorerPlugin,
  scorersConsume,
} from './routing/plugins.js';
export { type PowerOfTwoOptions, powerOfTwo } from './routing/power-of-two.js';
export { PrefixTree } from './routing/prefix-tree.js';
export { type RandomOptions, random } from './routing/random.js';
export {
  CACHE_KNOWING_POLICIES,
  createPolicy,
  POLICIES,
  POLICY_NAMES,
  type PolicyName,
  type PolicyPlugin,
  policyConsumes,
  type RoutingParams,
  type RoutingServices,
} from './routing/registry.js';
export { roundRobin } from './routing/round-robin.js';
export { RoutingInput, routingText, type ServiceLevelTargets } from './routing/routing-input.js';
export type { LoadView, RoutingPolicy } from './routing/routing-policy.js';
export { type Avoid, type Decision, LEG_ORDER, Scheduler, type SchedulerOptions } from './routing/scheduler.js';
export {
  type Filter,
  loadScorer,
  maxScorePicker,
  type Picker,
  type PrefixScorerOptions,
  prefixScorer,
  type ScoredPolicyParts,
  type Scorer,
  scoredPolicy,
  weightedRandomPicker,
} from './routing/scoring.js';
export { type Consumption, mergeConsumption, ROUTING_DATA, type RoutingData } from './routing/services.js';
export { type SessionAffinityOptions, sessionAffinity } from './routing/session-affinity.js';
export type {
  BindingRole,
  SessionBinding,
  SessionBindingStore,
  SessionBindingView,
} from './routing/session-bindings.js';
export {
  type LatencyFeatures,
  type LatencyPrediction,
  LatencyPredictor,
  type LatencyPredictorOptions,
  type LatencyRole,
} from './routing/slo/latency-predictor.js';
export { OnlineRidge, type OnlineRidgeOptions } from './routing/slo/online-regression.js';
export { sloFeasibleFilter, sloHeadroomScorer } from './routing/slo/slo-plugins.js';
export {
  attributeOf,
  type WellKnownAttribute,
  type WithAttributes,
  WORKER_ATTRIBUTES,
  type WorkerAttributes,
} from './routing/worker-attributes.js';
export {
  type Lease,
  type LegOutcome,
  NoWorkerError,
  type Selection,
  WorkerPool,
  type WorkerPoolOptions,
  type WorkerState,
} from './routing/worker-pool.js';
export { type AsyncEngineContext, Controller } from './runtime/controller.js';
export type { Logger, LogMethod } from './runtime/logger.js';
export { ResponseStream } from './runtime/response-stream.js';
export {
  type TokenizerEncoder,
  TokenizerError,
  TokenizerPool,
  type TokenizerPoolOptions,
} from './tokenize/tokenizer-pool.js';
export {
  type FindTokenizerOptions,
  type FoundTokenizer,
  findTokenizer,
  type TokenizerSpec,
  tokenizerSpec,
} from './tokenize/tokenizer-source.js';
export { type BrandCheck, branded, DisaggError } from './util/disagg-error.js';
export type { ErrorCode } from './util/error-codes.js';
export { workerRedactor } from './util/url.js';
