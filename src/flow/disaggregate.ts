import { PrefillError } from '../handoff/prefill-error.js';
import type { DecodeStream } from '../handoff/prefill-task.js';
import { PrefillTask } from '../handoff/prefill-task.js';
import type { Annotated } from '../protocol/annotated.js';
import type { LLMEngineOutput } from '../protocol/llm-engine-output.js';
import { type AsyncEngineContext, Controller } from '../runtime/controller.js';
import { defaultLogger, type Logger } from '../runtime/logger.js';
import { ResponseStream } from '../runtime/response-stream.js';
import { mintBootstrapRoom } from './bootstrap-room.js';
import type { Connector } from './connectors.js';
import { sanitizeClientRequest } from './handoff-fields.js';
import { type BootstrapInfo, classifyPrefill, type PrefillResult } from './prefill-stream.js';
import { decodeRequest, type RequestBody } from './request-shaping.js';
import { withPrefillUsage } from './usage.js';

type Item = Annotated<LLMEngineOutput>;

/** An engine leg: a request body and its context in, a response stream out. */
export type Engine = (request: RequestBody, context: AsyncEngineContext) => PromiseLike<ResponseStream<Item>>;

/** The prefill worker's rendezvous, for the concurrent family. */
export interface PrefillWorker {
  bootstrapHost: string;
  bootstrapPort: number;
  dpRank?: number;
  dpSize?: number;
}

/** Options of {@link disaggregate}. */
export interface DisaggregateOptions {
  /** The client's request body (OpenAI-style JSON). */
  request: RequestBody;
  /** The client's request context: a client stop reaches decode, never prefill. */
  context: AsyncEngineContext;
  prefill: Engine;
  decode: Engine;
  connector: Connector;
  /** Required by the concurrent family: where decode meets prefill. */
  prefillWorker?: PrefillWorker;
  /** Client-sent handoff fields: stripped (default) or refused. */
  clientHandoffFields?: 'strip' | 'reject';
  /**
   * Conditional disaggregation: answer true to send this request straight to decode
   * (aggregated), for example for a short or cache-hot prompt. If it throws, the request is
   * disaggregated anyway (and the error logged at warn), unless it was a cancellation
   * (`AbortError`), which fails the request.
   */
  skipPrefill?: (request: RequestBody) => boolean | PromiseLike<boolean>;
  logger?: Logger;
}

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
 * @throws {PrefillError} when prefill fails before decode is dispatched;
 *   {HandoffFieldError} for client handoff fields with `clientHandoffFields: 'reject'`;
 *   {TypeError} for a concurrent connector without `prefillWorker`.
 */
export async function disaggregate(options: DisaggregateOptions): Promise<ResponseStream<Item>> {
  const { connector, context, prefill, decode, logger } = options;
  const request = sanitizeClientRequest(options.request, { clientHandoffFields: options.clientHandoffFields });
  const prefillContext = new Controller(context.id);
  const taskOptions = logger === undefined ? {} : { logger };

  if (options.skipPrefill !== undefined && (await shouldSkip(options.skipPrefill, request, logger))) {
    return decode(decodeRequest(request), context);
  }

  if (connector.family === 'concurrent') {
    const bootstrap = rendezvous(options.prefillWorker, connector.name);
    const task = PrefillTask.spawn(async () => {
      const stream = await prefill(connector.prefillBody(request, bootstrap), prefillContext);
      for await (const item of stream) PrefillTask.checkOutput(item);
    }, taskOptions);
    return task.forwardDecode(
      () =>
        decode(connector.decodeBody(request, { kind: 'bootstrap', bootstrap }), context) as PromiseLike<DecodeStream>,
      context,
    );
  }

  let prefillStream: ResponseStream<Item>;
  try {
    prefillStream = await prefill(connector.prefillBody(request), prefillContext);
  } catch (error) {
    throw PrefillError.from(error);
  }
  const result: PrefillResult = await classifyPrefill(prefillStream, taskOptions);
  switch (result.kind) {
    case 'finished':
      return new ResponseStream(once(result.output), context);
    case 'early':
      return result.task.forwardDecode(
        () =>
          decode(
            connector.decodeBody(request, { kind: 'bootstrap', bootstrap: result.bootstrap }),
            context,
          ) as PromiseLike<DecodeStream>,
        context,
      );
    case 'handoff': {
      const { promptTokensDetails } = result;
      // Dispatched even if the client has stopped: the decode worker must claim the KV.
      const stream = await decode(
        connector.decodeBody(request, {
          kind: 'params',
          params: result.params,
          ...(promptTokensDetails === undefined ? {} : { promptTokensDetails }),
        }),
        context,
      );
      return promptTokensDetails === undefined ? stream : withPrefillUsage(stream, promptTokensDetails);
    }
  }
}

async function shouldSkip(
  skipPrefill: NonNullable<DisaggregateOptions['skipPrefill']>,
  request: RequestBody,
  logger: Logger | undefined,
): Promise<boolean> {
  try {
    return (await skipPrefill(request)) === true;
  } catch (error) {
    if ((error as { name?: unknown } | null)?.name === 'AbortError') throw error;
    (logger ?? defaultLogger()).warn({ err: error }, 'skipPrefill failed; disaggregating the request');
    return false;
  }
}

function rendezvous(worker: PrefillWorker | undefined, connector: string): BootstrapInfo {
  if (worker === undefined || typeof worker.bootstrapHost !== 'string' || !Number.isInteger(worker.bootstrapPort)) {
    throw new TypeError(
      `The ${connector} connector sends both legs at once and needs prefillWorker: { bootstrapHost, bootstrapPort }`,
    );
  }
  const dp = worker.dpSize === undefined ? {} : { dpRank: worker.dpRank ?? 0, dpSize: worker.dpSize };
  return {
    bootstrap_host: worker.bootstrapHost,
    bootstrap_port: worker.bootstrapPort,
    bootstrap_room: mintBootstrapRoom(dp),
  };
}

async function* once(item: Item): AsyncGenerator<Item> {
  yield item;
}
