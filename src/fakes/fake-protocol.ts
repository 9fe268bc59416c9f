import type { ServerResponse } from 'node:http';
import { ENDPOINTS, type EndpointName } from '../endpoints/registry.js';
import type { EngineName } from '../protocol/engines/wires.js';
import type { FakeAnswer } from './fake-plan.js';
import type { FakeRequest, FakeWorkerOptions, Fault } from './fake-types.js';
import type { KvLedger } from './kv-ledger.js';

/** What a protocol module may use of the fake worker it runs in. */
export interface WorkerSide {
  readonly ledger: KvLedger;
  readonly options: FakeWorkerOptions;
  readonly host: string;
  readonly port: number;
  /** This worker's engine id (vLLM names it in its handoff parameters). */
  readonly engineId: string;
  /** Resolves after `ms` (a timer the worker clears when it closes). */
  pause(ms: number): Promise<void>;
  /** Computes a prefill's prompt (see `FakeWorkerServer.computePrompt`): the tokens found cached, if it has a cache. */
  computePrompt(record: FakeRequest): Promise<number | undefined>;
  /** Two fresh KV block ids. */
  nextBlocks(): number[];
  /** Frees `key` as stranded after the worker's KV timeout, unless it is claimed first. */
  strandLater(key: string): void;
  /**
   * A ledger wait, cut short (undefined) by the bootstrap timeout, by the close of the worker,
   * or by `res` closing before it was answered (its caller went away).
   */
  untilDone<T>(
    res: ServerResponse,
    waiting: { promise: Promise<T | undefined>; cancel(): void },
  ): Promise<T | undefined>;
  /** What the worker's `answer` option says for this request. */
  answerFor(record: FakeRequest): FakeAnswer | undefined;
  /** Answers an OpenAI-style error. */
  answerError(res: ServerResponse, status: number, message: string): void;
  /** Answers JSON (exact big integers). */
  answerJson(res: ServerResponse, status: number, body: unknown): void;
}

/**
 * What differs between the engines a fake worker imitates: the routes it serves, how a
 * prefill call is recognised and answered, where a decode call takes its KV, and the
 * worker's own endpoints for the KV handoff.
 */
export interface FakeProtocol {
  readonly name: EngineName;
  /**
   * The endpoints of the registry the engine does not serve, each with why: the fake answers
   * them 404, as the engine does, and serves every other endpoint at its path
   * ({@link servedPaths}), so that an endpoint added to the registry is served by every fake
   * that does not name it here.
   */
  readonly unsupported: Readonly<Partial<Record<EndpointName, string>>>;
  /** How long a prefill holds KV no decode took, when the worker's `kvTimeoutMs` does not say; 60,000 ms if this does not either. */
  readonly kvTimeoutMs?: number | undefined;
  /**
   * A decode call with a prefill's KV that asks for what only the prompt's computation gives
   * (prompt logprobs, an echo with them) computes the prompt itself (vLLM, since it honours
   * `skip_reading_prefix_cache` for a connector's KV; before, its decode crashed, vllm#50792);
   * otherwise it answers without them (SGLang: empty input logprobs).
   */
  readonly recomputesPrompt?: boolean | undefined;
  /** Why a request body is refused (HTTP 400) before anything else, if it is. */
  refuse?(path: string, body: Record<string, unknown>): string | undefined;
  isPrefillCall(body: Record<string, unknown>): boolean;
  /** Computes one token, commits the KV and answers as the engine does. */
  prefill(worker: WorkerSide, res: ServerResponse, record: FakeRequest, fault: Fault | undefined): Promise<void>;
  /**
   * Where a decode call takes its KV (a URL and what to send, per handoff; none when it has
   * none). The endpoint answers 200 with `{ read }` (a `KvRead` of the ledger: `stale` for blocks
   * already freed), anything else for a transfer that failed.
   */
  kvSources(body: Record<string, unknown>): Array<{ url: string; payload: Record<string, unknown> }>;
  /**
   * The engine gave up a decode call before it took the KV its body names: its request
   * handler refused it (`refused`), or the call was aborted while it waited (`aborted`). vLLM
   * (0.21 and later) then tells the prefill worker to free the KV at once; engines without
   * such a clean-up leave it to their timeouts.
   */
  gaveUp?(worker: WorkerSide, body: Record<string, unknown>, why: 'refused' | 'aborted'): Promise<void>;
  /**
   * What a decode call does when the KV transfer failed (`failure` says why): compute the
   * prompt itself (`recompute`, vLLM's `kv_load_failure_policy: recompute`), or fail with this
   * status, in the stream (vLLM: an error chunk of a 200 stream, a 500 when whole) or before it.
   */
  kvLoadFailed?(
    worker: WorkerSide,
    failure: string,
  ): 'recompute' | { status: number; message: string; inStream: boolean };
  /** Why the engine's request handler refuses a body it parsed (a model it does not serve, say): status and message. */
  handlerRefusal?(worker: WorkerSide, body: Record<string, unknown>): { status: number; message: string } | undefined;
  /** The worker's endpoints that decode workers call to take KV. */
  readonly endpoints: Readonly<
    Record<string, (worker: WorkerSide, res: ServerResponse, body: Record<string, unknown>) => void | Promise<void>>
  >;
}

/**
 * The paths a fake of `protocol` serves (the same on the router and on the workers): every
 * endpoint's of the registry but those it names unsupported.
 */
export function servedPaths(protocol: Pick<FakeProtocol, 'unsupported'>): ReadonlySet<string> {
  return new Set(
    ENDPOINTS.filter((endpoint) => !Object.hasOwn(protocol.unsupported, endpoint.name)).map(
      (endpoint) => endpoint.path,
    ),
  );
}

/** The ledger key of vLLM KV blocks. */
export function kvKey(engineId: string, blocks: unknown): string {
  return `${engineId}/${Array.isArray(blocks) ? blocks.join(',') : String(blocks)}`;
}
