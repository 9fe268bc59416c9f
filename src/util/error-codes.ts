/**
 * The `code` of every error the library throws (each a `DisaggError`): the one list. The
 * proxy's table of answers (`server/error-answers`) is keyed by it, so that a code added here
 * without its answer does not compile, and a test holds this list to the codes in the sources.
 *
 * - `DISAGG_BAD_REQUEST`: a request body the router could not read (400).
 * - `DISAGG_BODY_TOO_LARGE`: a request body past the router's limit (413).
 * - `DISAGG_CLEANUP_EXPIRED`: decode did not take a handoff's KV within the clean-up budget after the client left.
 * - `DISAGG_CONFIG`: a setting, or a worker given to the admin API, that does not check.
 * - `DISAGG_DEADLINE_EXCEEDED`: one of the request's deadlines passed (504).
 * - `DISAGG_DISCOVERY_UNAVAILABLE`: Kubernetes discovery asked for without `@kubernetes/client-node`.
 * - `DISAGG_EPP_UNAVAILABLE`: `disagg epp` asked for without `@grpc/grpc-js`, `@grpc/proto-loader` and `grpc-health-check`.
 * - `DISAGG_HANDOFF_FIELD`: a client sent a field only the router may set (400).
 * - `DISAGG_KV_EVENTS_UNAVAILABLE`: KV events asked for without `zeromq`.
 * - `DISAGG_KV_EVENT_FORMAT`: a KV event message in no form the engines send.
 * - `DISAGG_LIMITS_UNAVAILABLE`: the limits' Redis unreachable with `--redis-failure closed` (503).
 * - `DISAGG_METHOD_NOT_ALLOWED`, `DISAGG_NOT_FOUND`: a route's method, or a path, the router does not serve.
 * - `DISAGG_NO_WORKER`: no worker of a pool in rotation (503).
 * - `DISAGG_OVERLOADED`: admission's slots and queue full, or a limit of the tenant's hit (429).
 * - `DISAGG_PLUGIN_NAME_TAKEN`: a routing plugin registered under a name its registry has (a built-in's, or one registered before).
 * - `DISAGG_PREEMPTED`: a request under way gave its slot to one of higher priority (`--preempt`; 503).
 * - `DISAGG_PREFILL_TARGET_REFUSED`: a sidecar's request named a prefill worker outside its allow-list (403).
 * - `DISAGG_PREFILL_FAILED`, `DISAGG_PREFILL_NOT_ACTIVATED`, `DISAGG_PREFILL_NO_HANDOFF_PARAMS`: the prefill leg failed, as `PrefillError` says.
 * - `DISAGG_PROFILE`: a simulated engine's profile unknown by name, or a profile file that does not check (`disagg simulate --profile`).
 * - `DISAGG_SHUTTING_DOWN`: the proxy stopped before the request ended (503).
 * - `DISAGG_ROUTE_UNSUPPORTED`: an API the fleet's engine cannot serve disaggregated (501).
 * - `DISAGG_STORE_QUOTA`: a tenant's stored Responses and Conversations at their limit (429).
 * - `DISAGG_STORE_UNAVAILABLE`: the store of Responses and Conversations unreachable (503).
 * - `DISAGG_STREAM_ERROR`: an error item that carried only its text.
 * - `DISAGG_TENANTS_FILE`: a tenants file that does not check.
 * - `DISAGG_TRACE_FORMAT`: a workload trace file not in Mooncake's format (`disagg simulate`'s traces).
 * - `DISAGG_TOKENIZER`: the router's tokenizer failed.
 * - `DISAGG_TRACING_UNAVAILABLE`: `--otlp-endpoint` without the OpenTelemetry packages.
 * - `DISAGG_UNSUPPORTED_REQUEST`: a request the engines cannot serve disaggregated, or that does not fit its route (400).
 * - `DISAGG_UPSTREAM_STATUS`, `DISAGG_UPSTREAM_CONNECTION`, `DISAGG_UPSTREAM_PROTOCOL`: a call to a worker failed, as `UpstreamError` says.
 * - `DISAGG_WORKER_EXISTS`, `DISAGG_WORKER_UNKNOWN`: the admin API's worker already in its pool, or not in it.
 * - `DISAGG_WORKER_LEAVING`: the admin API's undrain of a worker that is leaving its pool for good (409).
 * - `DISAGG_WORKLOAD`: a built-in workload asked for by a name it does not have (`disagg simulate --workload`).
 */
export type ErrorCode =
  | 'DISAGG_BAD_REQUEST'
  | 'DISAGG_BODY_TOO_LARGE'
  | 'DISAGG_CLEANUP_EXPIRED'
  | 'DISAGG_CONFIG'
  | 'DISAGG_DEADLINE_EXCEEDED'
  | 'DISAGG_DISCOVERY_UNAVAILABLE'
  | 'DISAGG_EPP_UNAVAILABLE'
  | 'DISAGG_HANDOFF_FIELD'
  | 'DISAGG_KV_EVENTS_UNAVAILABLE'
  | 'DISAGG_KV_EVENT_FORMAT'
  | 'DISAGG_LIMITS_UNAVAILABLE'
  | 'DISAGG_METHOD_NOT_ALLOWED'
  | 'DISAGG_NOT_FOUND'
  | 'DISAGG_NO_WORKER'
  | 'DISAGG_OVERLOADED'
  | 'DISAGG_PLUGIN_NAME_TAKEN'
  | 'DISAGG_PREEMPTED'
  | 'DISAGG_PREFILL_FAILED'
  | 'DISAGG_PREFILL_NOT_ACTIVATED'
  | 'DISAGG_PREFILL_NO_HANDOFF_PARAMS'
  | 'DISAGG_PREFILL_TARGET_REFUSED'
  | 'DISAGG_PROFILE'
  | 'DISAGG_ROUTE_UNSUPPORTED'
  | 'DISAGG_SHUTTING_DOWN'
  | 'DISAGG_STORE_QUOTA'
  | 'DISAGG_STORE_UNAVAILABLE'
  | 'DISAGG_STREAM_ERROR'
  | 'DISAGG_TENANTS_FILE'
  | 'DISAGG_TOKENIZER'
  | 'DISAGG_TRACE_FORMAT'
  | 'DISAGG_TRACING_UNAVAILABLE'
  | 'DISAGG_UNSUPPORTED_REQUEST'
  | 'DISAGG_UPSTREAM_STATUS'
  | 'DISAGG_UPSTREAM_CONNECTION'
  | 'DISAGG_UPSTREAM_PROTOCOL'
  | 'DISAGG_WORKER_EXISTS'
  | 'DISAGG_WORKER_LEAVING'
  | 'DISAGG_WORKER_UNKNOWN'
  | 'DISAGG_WORKLOAD';
