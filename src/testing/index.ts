// The `disagg/testing` subpath: fake prefill and decode workers that speak the vLLM and SGLang
// protocol subset a router uses, with a KV ledger and injectable faults, for tests without GPUs,
// a fake Kubernetes API that serves them as pods for label discovery, and a KV event publisher
// that speaks vLLM's ZMQ frames. And a simulated fleet that keeps time: engines with queues, KV
// blocks and the timing of published profiles, replaying traces and workloads on a virtual clock,
// or timing fake workers' answers live on a real-time one.

export { FakeKvCache, type FakeKvCacheOptions } from '../fakes/fake-kv-cache.js';
export { type FakeKvEvent, FakeKvPublisher, type FakeKvPublisherOptions } from '../fakes/fake-kv-publisher.js';
export type { FakeAnswer } from '../fakes/fake-plan.js';
export { FakePrefixCache, type FakePrefixCacheOptions } from '../fakes/fake-prefix-cache.js';
export {
  FakeSimulation,
  type FakeSimulationOptions,
  type SimPrompt,
  type SimulatedDecode,
  TokenPace,
} from '../fakes/fake-simulation.js';
export { type KvHandoff, KvLedger, type KvRead } from '../fakes/kv-ledger.js';
export { type KvMatch, type KvNode, KvTree, type KvTreeEvent, type KvTreeOptions } from '../simulation/kv-tree.js';
export type { Percentiles } from '../simulation/latency-stats.js';
export { cpuLoadMs, decodeStepMs, decodeThroughput, prefillMs, transferMs } from '../simulation/profile-timing.js';
export type { EngineProfile, ProfilePoint, ProfileSource } from '../simulation/profile-types.js';
export {
  checkProfile,
  DEFAULT_PROFILE,
  findProfile,
  PROFILES,
  ProfileError,
  profileSummary,
  readProfile,
} from '../simulation/profiles.js';
export { RealtimeClock, type RealtimeClockOptions } from '../simulation/realtime-clock.js';
export {
  contextLimit,
  type ReplayOptions,
  type ReplaySummary,
  replay,
  type ServiceLevels,
  type SimDecision,
  type SimEnding,
  type SimLease,
  type SimObservation,
  type SimRouter,
  type TenantSummary,
} from '../simulation/replay.js';
export { type EngineCounters, SimEngine, type SimEngineOptions } from '../simulation/sim-engine.js';
export type { JobKind, JobListener, JobRequest } from '../simulation/sim-job.js';
export { tokenBlocks } from '../simulation/token-blocks.js';
export {
  parseTrace,
  parseTraceLine,
  readTrace,
  scaleRate,
  summarizeTrace,
  TRACE_BLOCK_TOKENS,
  TraceFormatError,
  type TraceRequest,
  type TraceSummary,
} from '../simulation/trace.js';
export { type SimClock, VirtualClock } from '../simulation/virtual-clock.js';
export {
  UnknownWorkloadError,
  WORKLOADS,
  type WorkloadOptions,
  type WorkloadSettings,
  type WorkloadShape,
  workload,
} from '../simulation/workloads.js';
export {
  type FakeInferencePool,
  type FakeKubernetesApi,
  type FakePod,
  fakeKubeconfig,
  startFakeKubernetesApi,
} from './fake-kubernetes-api.js';
export {
  type FakeRequest,
  type FakeWorker,
  type FakeWorkerOptions,
  type Fault,
  startFakeWorker,
} from './fake-worker.js';
