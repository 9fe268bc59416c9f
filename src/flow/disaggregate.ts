import type { Endpoint } from '../endpoints/endpoint.js';
import { endpointOf, isEndpointName } from '../endpoints/registry.js';
import type { EngineItem } from '../protocol/annotated.js';
import { RoutingInput } from '../routing/routing-input.js';
import { type Decision, Scheduler } from '../routing/scheduler.js';
import { type Lease, NoWorkerError, WorkerPool } from '../routing/worker-pool.js';
import { type AsyncEngineContext, Controller, isContext } from '../runtime/controller.js';
import { libraryLogger } from '../runtime/library-logger.js';
import type { Logger } from '../runtime/logger.js';
import { repeatedLogOf } from '../runtime/repeated-log.js';
import type { ResponseStream } from '../runtime/response-stream.js';
import { describeValue } from '../util/describe-value.js';
import { clientError, failedLeg } from './client-stream.js';
import { checkBudget, checkDeadlines, pause } from './deadlines.js';
import { DEFAULT_CLEANUP_BUDGET_MS } from './decode-leg.js';
import { type FlowEventListener, FlowRecorder } from './events.js';
import { FlowRun } from './flow-run.js';
import type { EngineCall, FlowMigration } from './flow-setup.js';
import { sanitizeClientRequest } from './handoff-fields.js';
import type { ContinuationStart } from './migrating-stream.js';
import { migrationPlan } from './migration.js';
import { type RequestBody, UnsupportedRequestError, UnsupportedRouteError } from './request-shaping.js';
import { withUsageAsked } from './usage.js';

// An engine leg's type lives with the runtime, below both the flow and the transport.
export type { Engine } from '../runtime/engine.js';

import type { DisaggregateOptions, PrefillWorker } from './disaggregate-options.js';

export type { DisaggregateOptions, PrefillWorker } from './disaggregate-options.js';

/**
 * Runs one request through prefill and decode and returns the stream for the client.
 *
 * Prefill runs on its own context with the client's request id, so nothing the client does
 * cancels it. By family:
 * - sequential: prefill runs to completion with a one-token budget, its answer is classified
 *   ({@link classifyPrefill}); a finished first output is the whole answer, otherwise decode
 *   is dispatched with the handoff parameters, also when the client has already stopped, so
 *   that the decode worker takes (and frees) the KV; the usage it reports gets the prefill
 *   leg's `prompt_tokens_details` (cached tokens are counted where the prompt was computed);
 * - concurrent: the rendezvous is minted here, both legs are sent at once, and
 *   `PrefillTask.forwardDecode` watches prefill while decode streams;
 * - early: decode starts as soon as prefill's first output names the rendezvous, watched by
 *   the task that drains the rest of prefill.
 *
 * Decode runs on its own context too (same id). A client stop or kill reaches it once decode
 * has answered for the first time (it has then taken the KV); before that, the leg is read
 * until it does, within `cleanupBudgetMs`, so that no KV is stranded on the prefill worker.
 *
 * The client stream ends after its first terminal item (a finish reason or an error item) and
 * has exactly one outcome, reported by the `finished` event. A prefill failure after decode
 * started is one error item; a deadline is one error item carrying the `DeadlineError`.
 *
 * @example
 * const stream = await disaggregate({
 *   request: body, context: new Controller(requestId), connector: vllmNixl,
 *   prefill: (body, context) => prefillEngine(body, context),
 *   decode: (body, context) => decodeEngine(body, context),
 *   deadlines: { prefillFirstOutputMs: 30_000, idleMs: 10_000 },
 * });
 * for await (const item of stream) send(item);
 *
 * @throws {PrefillError} when prefill fails before decode is dispatched;
 *   {DeadlineError} when a budget runs out before the client stream exists;
 *   {HandoffFieldError} for client handoff fields with `clientHandoffFields: 'reject'`;
 *   {UnsupportedRequestError} for a request body that is not a JSON object (`param` `body`), or
 *   one the connector's engine cannot serve disaggregated (`n > 1` with vLLM's NIXL or
 *   TensorRT-LLM, say), naming the field;
 *   {TypeError} for invalid options, or a concurrent connector without a prefill worker rendezvous.
 */
export async function disaggregate<P = PrefillWorker, D = unknown>(
  options: DisaggregateOptions<P, D>,
): Promise<ResponseStream<EngineItem>> {
  checkOptions(options);
  const { connector, context, logger } = options;
  const endpoint = options.endpoint ?? endpointOf(options.request);
  const sanitized = sanitizeClientRequest(options.request, { clientHandoffFields: options.clientHandoffFields });
  // Usage asked of the workers on the client's behalf is taken off what the client reads.
  const asked = options.usage === 'always' ? withUsageAsked(sanitized, endpoint) : undefined;
  const askUsage = asked !== undefined;
  const request = asked ?? sanitized;
  // What the engine cannot serve disaggregated it may still serve on decode alone.
  // An endpoint of the caller's own (none of the registry's) has no entry to look up.
  const unsupported = isEndpointName(endpoint.name) ? connector.unsupported?.[endpoint.name] : undefined;
  const refused = connector.refuse?.(request, endpoint);
  if (refused !== undefined) throw new UnsupportedRequestError(refused.param, refused.message);
  const deadlines = checkDeadlines(options.deadlines);
  const cleanupBudgetMs = checkBudget('cleanupBudgetMs', options.cleanupBudgetMs, DEFAULT_CLEANUP_BUDGET_MS);
  const log = () => libraryLogger(logger);

  // What routing policies look at: worked out once, and only if a policy asks.
  const input = options.input ?? new RoutingInput(request, options.sessionKey, options.promptTokenIds, endpoint);
  const scheduler = options.scheduler ?? new Scheduler<P, D>(options);
  // The P/D verdict, once per request (it may wait on a cache lookup): the caller's own where
  // it has one (a pipeline that asked already, a migration's), else the scheduler's deciders.
  const skipped =
    options.skipPrefill !== undefined
      ? await shouldSkip(options.skipPrefill, request, input, logger, 'skipPrefill')
      : scheduler.decides
        ? await shouldSkip((_request, given) => scheduler.verdict(given), request, input, logger, 'The P/D decider')
        : undefined;
  // The recorder is worker-agnostic; the workers it names are the pools' own. One for the
  // request, whatever its attempts: one `finished`, `settled` last.
  const recorder = new FlowRecorder(context.id, options.onEvent as FlowEventListener | undefined, log);
  const retryPrefill = retryPolicy('retryPrefill', options.retryPrefill, log);
  const migration = migrationFor(options, scheduler, request, endpoint, input, recorder);
  const avoid = { prefill: [...(options.avoid?.prefill ?? [])], decode: [...(options.avoid?.decode ?? [])] };
  for (let attempt = 0; ; attempt++) {
    let decision: Decision<P, D>;
    try {
      decision = scheduler.decide(input, avoid, skipped);
    } catch (error) {
      // No worker left for a retry: the request, already under way, ends with that.
      // The leg that found no worker: the scheduler names its pool.
      const pool = NoWorkerError.is(error) ? error.pool : undefined;
      const leg = pool === 'prefill' || pool === 'decode' ? pool : undefined;
      if (attempt > 0) recorder.finish('error', leg, error instanceof Error ? error : undefined);
      throw error;
    }
    const skip = decision.strategy === 'aggregated' ? decision.reason : undefined;
    // As the reference router does: no prefill worker in rotation, so decode serves the
    // request whole rather than failing it.
    if (skip === 'no-prefill-worker') {
      // Every request says so while prefill is down: once per interval, with a count.
      const message = 'No prefill worker is available; serving the request aggregated';
      repeatedLogOf(log()).write('warn', message, { requestId: context.id }, message);
    }
    const prefillLease =
      decision.strategy === 'disaggregated' ? (decision.prefill as Lease<unknown> | undefined) : undefined;
    const decodeLease = decision.decode as Lease<unknown> | undefined;
    const refusal = attempt === 0 ? options.refuseDecision?.(decision, input) : undefined;
    if (refusal !== undefined) {
      // Refused before either leg is called: the workers chosen are given back untouched.
      prefillLease?.release();
      decodeLease?.release();
      throw refusal;
    }
    if (unsupported !== undefined && decision.strategy === 'disaggregated') {
      // Refused before either leg is called: the workers chosen are given back untouched.
      prefillLease?.release();
      decodeLease?.release();
      const error = new UnsupportedRouteError(endpoint.path, unsupported);
      if (attempt > 0) recorder.finish('error', undefined, error);
      throw error;
    }
    // With retries each attempt has a context of its own (a failed attempt stops its own, as
    // a prefill failure does), which the client's stops in turn.
    let client = context;
    if (retryPrefill !== undefined) {
      client = new Controller(context.id);
      context.linkChild(client as Controller);
    }
    const run = new FlowRun({
      request,
      endpoint,
      client,
      prefill: options.prefill as EngineCall,
      decode: options.decode as EngineCall,
      connector,
      prefillLease,
      decodeLease,
      predictedCachedTokens: prefillLease === undefined ? undefined : input.predictedCached(prefillLease.worker),
      reacquireDecode:
        scheduler.decodeWorkers === undefined
          ? undefined
          : (passOver) => scheduler.decodeElsewhere(passOver as D[], input) as Lease<unknown>,
      retryDecode: retryPolicy('retryDecode', options.retryDecode, log),
      reuseHandoff: options.reuseHandoff ?? 'unreached',
      deadlines,
      cleanupBudgetMs,
      recorder,
      logger: log,
      migration,
      hideUsage: askUsage,
    });
    try {
      return await run.start(skip);
    } catch (error) {
      const delayMs = retryPrefill === undefined || context.isStopped() ? undefined : retryPrefill(error, attempt);
      if (delayMs === undefined) throw run.failed(error);
      const leg = failedLeg(error);
      const failed = run.workers;
      if (leg === 'prefill' && failed.prefill !== undefined) avoid.prefill.push(failed.prefill as P);
      if (leg === 'decode' && failed.decode !== undefined) avoid.decode.push(failed.decode as D);
      recorder.emit({
        type: 'prefillRetried',
        attempt: attempt + 1,
        error: error instanceof Error ? error : new Error(String(error)),
        delayMs,
        ...(leg === undefined ? {} : { leg }),
        ...(failed.prefill === undefined ? {} : { prefillWorker: failed.prefill }),
        ...(failed.decode === undefined ? {} : { decodeWorker: failed.decode }),
      });
      await waitFor(delayMs, context);
      // A client that left meanwhile ends the request: cancelled, and the failure its answer.
      if (context.isStopped()) {
        recorder.finish('cancelled');
        throw clientError(error);
      }
    }
  }
}

/** Waits `ms` (on the flow's one timer), or less if the client leaves meanwhile. */
function waitFor(ms: number, context: AsyncEngineContext): Promise<void> {
  const wait = pause(ms);
  return Promise.race([wait.done, context.stopped()]).finally(() => wait.cancel());
}

/** The caller's `retryPrefill` or `retryDecode`, with a throw or a non-wait taken as no retry. */
function retryPolicy(
  option: 'retryPrefill' | 'retryDecode',
  retry: DisaggregateOptions['retryDecode'],
  log: () => Logger,
): ((error: unknown, attempt: number) => number | undefined) | undefined {
  if (retry === undefined) return undefined;
  return (error, attempt) => {
    try {
      const delayMs = retry(error, attempt);
      return typeof delayMs === 'number' && Number.isFinite(delayMs) && delayMs >= 0 ? delayMs : undefined;
    } catch (thrown) {
      log().warn(
        { err: thrown },
        option === 'retryDecode'
          ? 'retryDecode threw; the decode failure is not retried'
          : 'retryPrefill threw; the request is not retried',
      );
      return undefined;
    }
  };
}

/**
 * What the flow needs to migrate this request, or undefined when migration is off. A
 * continuation is this flow again on the continuation's body, passing over the workers that
 * broke: aggregated on a decode worker (`via: 'decode'`) or through a prefill (`'prefill'`).
 */
function migrationFor<P, D>(
  options: DisaggregateOptions<P, D>,
  scheduler: Scheduler<P, D>,
  request: RequestBody,
  endpoint: Endpoint,
  input: RoutingInput,
  recorder: FlowRecorder,
): FlowMigration | undefined {
  const { migration } = options;
  // A whole answer that breaks has sent nothing: there is nothing to continue.
  if (migration === undefined || migration.limit === 0 || request.stream !== true) return undefined;
  const plan = migrationPlan(request, {
    endpoint,
    ...(options.connector.tokenIds === undefined ? {} : { tokenIdRoutes: options.connector.tokenIds }),
    ...(migration.maxModelLen === undefined ? {} : { maxModelLen: migration.maxModelLen }),
  });
  const start = async (
    body: RequestBody,
    avoid: readonly unknown[],
    context: AsyncEngineContext,
    continued: Endpoint,
  ): Promise<ContinuationStart> => {
    let worker: unknown;
    // The outer request settles after its continuation's legs are over too.
    const held = recorder.hold();
    let settled = false;
    const settle = () => {
      if (settled) return;
      settled = true;
      held();
    };
    try {
      const stream = await disaggregate<P, D>({
        ...options,
        request: body,
        endpoint: continued,
        input: undefined,
        context,
        avoid: { ...options.avoid, decode: [...(options.avoid?.decode ?? []), ...(avoid as D[])] },
        migration: undefined,
        retryPrefill: undefined,
        refuseDecision: undefined,
        promptTokenIds: undefined,
        ...(migration.via === 'prefill' ? {} : { skipPrefill: () => 'migration' }),
        onEvent: (event) => {
          if (event.type === 'routed') worker = event.decodeWorker;
          if (event.type === 'settled') settle();
        },
      });
      return { stream, worker };
    } catch (error) {
      settle();
      throw error;
    }
  };
  return {
    plan,
    limit: migration.limit,
    maxSeqLen: migration.maxSeqLen,
    maxModelLen: migration.maxModelLen,
    promptIds: input.tokenIds,
    watchDown:
      scheduler.decodeWorkers === undefined
        ? undefined
        : (worker, listener) => (scheduler.decodeWorkers as WorkerPool<D>).onDown(worker as D, listener),
    start,
  };
}

function checkOptions<P, D>(options: DisaggregateOptions<P, D>): void {
  if (typeof options !== 'object' || options === null) {
    throw new TypeError(`disaggregate expects an options object, got ${describeValue(options)}`);
  }
  const { request } = options;
  if (typeof request !== 'object' || request === null || Array.isArray(request)) {
    // The client's mistake, not a prefill failure: a router answers it 400.
    throw new UnsupportedRequestError('body', `The request body must be a JSON object, got ${describeValue(request)}`);
  }
  if (!isContext(options.context)) {
    throw new TypeError(
      `disaggregate expects context to be the client's AsyncEngineContext, got ${describeValue(options.context)}`,
    );
  }
  for (const leg of ['prefill', 'decode'] as const) {
    if (typeof options[leg] !== 'function') {
      throw new TypeError(
        `disaggregate expects ${leg} to be an engine function (request, context, worker) => Promise<ResponseStream>, got ${describeValue(options[leg])}`,
      );
    }
  }
  const { connector } = options;
  if (
    typeof connector !== 'object' ||
    connector === null ||
    !['sequential', 'concurrent', 'early'].includes(connector.family) ||
    typeof connector.prefillBody !== 'function' ||
    typeof connector.decodeBody !== 'function'
  ) {
    throw new TypeError(
      `disaggregate expects connector to be a Connector (family, prefillBody, decodeBody), such as vllmNixl or sglangBootstrap; got ${describeValue(connector)}`,
    );
  }
  for (const pool of ['prefillWorkers', 'decodeWorkers'] as const) {
    if (options[pool] !== undefined && !(options[pool] instanceof WorkerPool)) {
      throw new TypeError(`disaggregate expects ${pool} to be a WorkerPool, got ${describeValue(options[pool])}`);
    }
  }
  if (options.sessionKey !== undefined && typeof options.sessionKey !== 'string') {
    throw new TypeError(`sessionKey must be a string, got ${describeValue(options.sessionKey)}`);
  }
  if (options.refuseDecision !== undefined && typeof options.refuseDecision !== 'function') {
    throw new TypeError(
      `refuseDecision must be a function (decision, input) => Error | undefined, got ${describeValue(options.refuseDecision)}`,
    );
  }
  for (const option of ['retryDecode', 'retryPrefill'] as const) {
    if (options[option] !== undefined && typeof options[option] !== 'function') {
      throw new TypeError(
        `${option} must be a function (error, attempt) => milliseconds | undefined, got ${describeValue(options[option])}`,
      );
    }
  }
  if (options.reuseHandoff !== undefined && options.reuseHandoff !== 'unreached' && options.reuseHandoff !== 'always') {
    throw new TypeError(`reuseHandoff must be 'unreached' or 'always', got ${describeValue(options.reuseHandoff)}`);
  }
  if (options.onEvent !== undefined && typeof options.onEvent !== 'function') {
    throw new TypeError(`onEvent must be a function (event) => void, got ${describeValue(options.onEvent)}`);
  }
}

/** The verdict of `skipPrefill` (named `who` in the warning when it fails: the request is disaggregated then). */
async function shouldSkip(
  skipPrefill: NonNullable<DisaggregateOptions['skipPrefill']>,
  request: RequestBody,
  input: RoutingInput,
  logger: Logger | undefined,
  who: string,
): Promise<string | undefined> {
  try {
    const answer = await skipPrefill(request, input);
    if (answer === true) return 'skipPrefill';
    return typeof answer === 'string' && answer !== '' ? answer : undefined;
  } catch (error) {
    if ((error as { name?: unknown } | null)?.name === 'AbortError') throw error;
    libraryLogger(logger).warn({ err: error }, `${who} failed; disaggregating the request`);
    return undefined;
  }
}
