// The `disagg/testing` subpath: fake prefill and decode workers that speak the vLLM and SGLang
// protocol subset a router uses, with a KV ledger and injectable faults, for tests without GPUs,
// a fake Kubernetes API that serves them as pods for label discovery, and a KV event publisher
// that speaks vLLM's ZMQ frames.

export { FakeKvCache, type FakeKvCacheOptions } from '../fakes/fake-kv-cache.js';
export { type FakeKvEvent, FakeKvPublisher, type FakeKvPublisherOptions } from '../fakes/fake-kv-publisher.js';
export type { FakeAnswer } from '../fakes/fake-plan.js';
export { FakePrefixCache, type FakePrefixCacheOptions } from '../fakes/fake-prefix-cache.js';
export { type KvHandoff, KvLedger, type KvRead } from '../fakes/kv-ledger.js';
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
