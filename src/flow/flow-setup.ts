import type { Endpoint } from '../endpoints/endpoint.js';
import type { EngineItem } from '../protocol/annotated.js';
import type { Lease } from '../routing/worker-pool.js';
import type { AsyncEngineContext } from '../runtime/controller.js';
import type { Logger } from '../runtime/logger.js';
import type { ResponseStream } from '../runtime/response-stream.js';
import type { Connector } from './connectors.js';
import type { Deadlines } from './deadlines.js';
import type { FlowRecorder } from './events.js';
import type { MigratingSetup } from './migrating-stream.js';
import type { MigrationPlan } from './migration.js';
import type { RequestBody } from './request-shaping.js';

/** An engine leg as the flow calls it: body, context, the worker chosen for it, and the API the body is for (always given). */
export type EngineCall = (
  request: RequestBody,
  context: AsyncEngineContext,
  worker: unknown,
  endpoint: Endpoint,
) => PromiseLike<ResponseStream<EngineItem>>;

/** @internal */
export interface FlowSetup {
  request: RequestBody;
  /** The API the request came in on. */
  endpoint: Endpoint;
  client: AsyncEngineContext;
  prefill: EngineCall;
  decode: EngineCall;
  connector: Connector;
  prefillLease: Lease<unknown> | undefined;
  decodeLease: Lease<unknown> | undefined;
  /** What the prefill pool's policy expected its worker to hold cached, for the `routed` event. */
  predictedCachedTokens?: number | undefined;
  /** Another decode worker, passing over `avoid` (the pool's `acquire`); none without a pool. */
  reacquireDecode: ((avoid: readonly unknown[]) => Lease<unknown>) | undefined;
  /** The wait before sending a failed sequential decode again, or undefined to fail. */
  retryDecode: ((error: unknown, attempt: number) => number | undefined) | undefined;
  /** Whether a failed decode's handoff may go to another decode worker only when it was never reached. */
  reuseHandoff: 'unreached' | 'always';
  deadlines: Readonly<Deadlines>;
  cleanupBudgetMs: number;
  recorder: FlowRecorder;
  logger: () => Logger;
  /** Decode migration, for a request it is on for (see `migrating-stream`). */
  migration?: FlowMigration | undefined;
  /** The usage was asked of the workers on the client's behalf: its chunks are not the client's. */
  hideUsage?: boolean | undefined;
}

/** @internal What the flow needs to migrate a request's decode stream. */
export interface FlowMigration {
  plan: MigrationPlan;
  limit: number;
  maxSeqLen: number | undefined;
  maxModelLen: number | undefined;
  promptIds: readonly number[] | undefined;
  watchDown: ((worker: unknown, listener: () => void) => () => void) | undefined;
  start: MigratingSetup['start'];
}
