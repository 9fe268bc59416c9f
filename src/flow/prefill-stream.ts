import { PrefillError } from '../handoff/prefill-error.js';
import { PrefillTask, type PrefillTaskOptions } from '../handoff/prefill-task.js';
import type { EngineItem } from '../protocol/annotated.js';
import { Annotated, type WireChunk } from '../protocol/annotated.js';
import { withoutAnswerHandoff } from '../protocol/engines/handoff-wire.js';
import type { LLMEngineOutput } from '../protocol/llm-engine-output.js';
import { closeQuietly } from '../util/close-quietly.js';

/** Where the decode worker meets the prefill worker in an early (bootstrap) handoff. */
export interface BootstrapInfo {
  bootstrap_host: string | string[];
  bootstrap_port: number | number[];
  /**
   * Unsigned 64-bit: a `bigint`, so that it stays exact above 2^53. A batched request (several
   * prompts, or `n > 1`) has one per element, and lists of hosts and ports beside them.
   */
  bootstrap_room: bigint | bigint[];
}

/** What a prefill answered, as the flow needs it. */
export type PrefillResult =
  /** Prefill ran to completion; decode takes over with these handoff parameters. */
  | { kind: 'handoff'; params: unknown; output: EngineItem; promptTokensDetails?: Record<string, unknown> | undefined }
  /**
   * Prefill's first output already finished the request (a finish reason other than
   * `length`); `params` are the handoff parameters it named all the same (vLLM holds the KV
   * of a request stopped at its first token), which no decode will take.
   */
  | { kind: 'finished'; output: EngineItem; params?: unknown | undefined }
  /**
   * Early handoff: the first output carried the bootstrap triple; decode may start now while
   * `task` drains the rest of the prefill stream, failing on any error output.
   */
  | { kind: 'early'; bootstrap: BootstrapInfo; output: EngineItem; task: PrefillTask };

/**
 * Reads a prefill response and says what it means for the request (the reference's
 * classification of the prefill stream):
 * - no output at all, or an error as the first item: a `PrefillError` (kind `prefill`);
 * - a first output whose `disaggregated_params` hold a valid `bootstrap_host`,
 *   `bootstrap_port` and `bootstrap_room`: an early handoff, the rest drained in the
 *   background by a {@link PrefillTask} that applies `checkOutput` to every item;
 * - a first output with a finish reason other than `length`: the request is finished, and
 *   that output (without its `disaggregated_params`) is the answer;
 * - otherwise the stream is drained (an error item fails it) and its `disaggregated_params`
 *   and `prompt_tokens_details` kept; none at all, or a TensorRT-LLM context response without a
 *   `ctx_request_id`, is a `PrefillError` of kind `no_disaggregated_params`.
 *
 * @throws {PrefillError} as above; the prefill iterator is closed whenever it is left early.
 */
export async function classifyPrefill(
  stream: AsyncIterable<EngineItem>,
  options: PrefillTaskOptions = {},
): Promise<PrefillResult> {
  const iterator = stream[Symbol.asyncIterator]();
  let handedOver = false;
  try {
    const first = await iterator.next();
    if (first.done === true) {
      throw new PrefillError('prefill', 'Prefill router returned no output (stream ended)');
    }
    const output = first.value;
    const error = Annotated.err(output);
    if (error !== undefined) {
      throw new PrefillError('prefill', `Prefill router returned error in output: ${error.message}`, { cause: error });
    }
    const bootstrap = bootstrapInfo(output?.data?.disaggregated_params);
    if (bootstrap !== undefined) {
      handedOver = true;
      const task = PrefillTask.spawn(async () => {
        PrefillTask.checkOutput(output);
        for (let next = await iterator.next(); next.done !== true; next = await iterator.next()) {
          PrefillTask.checkOutput(next.value);
        }
      }, options);
      return { kind: 'early', bootstrap, output, task };
    }
    const reason = output?.data?.finish_reason;
    if (reason !== undefined && reason !== null && reason !== 'length') {
      // A finished answer is classified like any prefill output: an abort or an error fails.
      PrefillTask.checkOutput(output);
      const { disaggregated_params: params, ...data } = output.data as LLMEngineOutput;
      return {
        kind: 'finished',
        output: withoutHandoff({ ...output, data }, Annotated.wire(output)),
        ...(params === undefined || params === null ? {} : { params }),
      };
    }
    let params = output?.data?.disaggregated_params;
    let promptTokensDetails = details(output);
    for (let next = await iterator.next(); next.done !== true; next = await iterator.next()) {
      const item = next.value;
      const failure = Annotated.err(item);
      if (failure !== undefined) {
        throw new PrefillError('prefill', `Prefill router returned error in output: ${failure.message}`, {
          cause: failure,
        });
      }
      params ??= item?.data?.disaggregated_params ?? undefined;
      promptTokensDetails = details(item) ?? promptTokensDetails;
    }
    if (output?.data === undefined || output.data === null) {
      throw new PrefillError('no_disaggregated_params', 'the first prefill output had no data');
    }
    if (params === undefined || params === null) {
      throw new PrefillError('no_disaggregated_params', 'no output carried disaggregated_params');
    }
    checkContextResponse(params);
    return {
      kind: 'handoff',
      params,
      output,
      ...(promptTokensDetails === undefined ? {} : { promptTokensDetails }),
    };
  } finally {
    // Left early (an error, a finished request) or read to the end: either way we are done
    // with it, unless the early handoff's task now owns it.
    if (!handedOver) closeQuietly(iterator);
  }
}

/** A TensorRT-LLM context response must name the context request decode continues. */
function checkContextResponse(params: unknown): void {
  if (typeof params !== 'object' || params === null) return;
  const fields = params as { ctx_request_id?: unknown; request_type?: unknown };
  const isContext = 'ctx_request_id' in fields || fields.request_type === 'context_only';
  if (isContext && (fields.ctx_request_id === undefined || fields.ctx_request_id === null)) {
    throw new PrefillError(
      'no_disaggregated_params',
      'the TensorRT-LLM context response has no ctx_request_id for the generation request',
    );
  }
}

function details(item: EngineItem): Record<string, unknown> | undefined {
  const found = item?.data?.completion_usage?.prompt_tokens_details;
  return found === undefined || found === null ? undefined : (found as Record<string, unknown>);
}

/**
 * The bootstrap triple, when all three fields are present and valid.
 *
 * @throws {PrefillError} (`no_disaggregated_params`) for a room that arrived as a JSON number
 *   above 2^53 - 1: it has already lost precision, and the decode worker would wait for a
 *   rendezvous that never comes.
 */
function bootstrapInfo(params: unknown): BootstrapInfo | undefined {
  if (typeof params !== 'object' || params === null) return undefined;
  const { bootstrap_host: host, bootstrap_port: port, bootstrap_room: room } = params as Record<string, unknown>;
  if (typeof host !== 'string' || host === '') return undefined;
  if (!Number.isInteger(port) || (port as number) < 0 || (port as number) >= 65536) return undefined;
  if (typeof room === 'number' && Number.isInteger(room) && !Number.isSafeInteger(room) && room > 0) {
    throw new PrefillError(
      'no_disaggregated_params',
      `bootstrap_room ${room} arrived as a JSON number above 2^53 - 1 and has lost precision; read the response with a lossless JSON parser (or send the room as a string)`,
    );
  }
  const exactRoom = toRoom(room);
  if (exactRoom === undefined) return undefined;
  return { bootstrap_host: host, bootstrap_port: port as number, bootstrap_room: exactRoom };
}

/** An unsigned 64-bit room from a bigint, a safe integer, or a decimal string. */
function toRoom(value: unknown): bigint | undefined {
  let room: bigint;
  if (typeof value === 'bigint') room = value;
  else if (typeof value === 'number' && Number.isSafeInteger(value)) room = BigInt(value);
  else if (typeof value === 'string' && /^\d{1,20}$/.test(value)) room = BigInt(value);
  else return undefined;
  return room >= 0n && room < 1n << 64n ? room : undefined;
}

/**
 * A finished prefill answer as the client may see it: what the worker sent, without the
 * handoff parameters it named (wherever its engine puts them: {@link withoutAnswerHandoff}),
 * which are the router's business.
 */
function withoutHandoff(item: EngineItem, wire: readonly WireChunk[] | undefined): EngineItem {
  if (wire === undefined) return item;
  return Annotated.withWire(
    item,
    wire.map((chunk) => ({ form: chunk.form, text: undefined, json: withoutAnswerHandoff(chunk.json) })),
  );
}
