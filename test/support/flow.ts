import type { Endpoint } from '../../src/endpoints/endpoint.js';
import { vllmNixl } from '../../src/engines/registry.js';
import { type DisaggregateOptions, disaggregate, type Engine } from '../../src/flow/disaggregate.js';
import type { FlowEvent } from '../../src/flow/events.js';
import type { RequestBody } from '../../src/flow/request-shaping.js';
import { Annotated } from '../../src/protocol/annotated.js';
import { LLMEngineOutput } from '../../src/protocol/llm-engine-output.js';
import { type AsyncEngineContext, Controller } from '../../src/runtime/controller.js';
import { ResponseStream } from '../../src/runtime/response-stream.js';
import { recordingLogger, ScriptedSource, token } from './async.js';

export const client = { model: 'm', prompt: 'Hello', max_tokens: 64, stream: true, min_tokens: 3 };
export const kvParams = {
  remote_engine_id: 'e1',
  remote_block_ids: [4, 5],
  remote_host: '10.0.0.2',
  remote_port: 5600,
};

export interface EngineCallRecord {
  body: RequestBody;
  context: AsyncEngineContext;
  worker: unknown;
  /** The endpoint the flow named for the call. */
  endpoint: Endpoint | undefined;
  source: ScriptedSource;
}

/** A fake engine: records what it was sent and answers with a scripted stream. */
export function engine(answer: (body: RequestBody) => ScriptedSource) {
  const calls: EngineCallRecord[] = [];
  const run: Engine<unknown> = async (body, context, worker, endpoint) => {
    const source = answer(body);
    calls.push({ body, context, worker, endpoint, source });
    return new ResponseStream(source, context);
  };
  return { run, calls };
}

/** The prefill item that hands off with vLLM's kv_transfer_params. */
export const handoffItem = () =>
  Annotated.fromData<LLMEngineOutput>({ token_ids: [9], finish_reason: 'length', disaggregated_params: kvParams });

/** A prefill worker that hands off with vLLM's kv_transfer_params. */
export const prefillWithParams = () => engine(() => new ScriptedSource([handoffItem()]).end());

/** A decode worker that answers two tokens and `length`. */
export const decodeTokens = () =>
  engine(() => new ScriptedSource([token(1), token(2), Annotated.fromData(LLMEngineOutput.length())]).end());

/** Records the events of a request; `types` lists their types in order. */
export function eventLog() {
  const events: FlowEvent[] = [];
  return {
    events,
    onEvent: (event: FlowEvent) => {
      events.push(event);
    },
    types: () => events.map((event) => event.type),
    of: <K extends FlowEvent['type']>(type: K) =>
      events.filter((event): event is Extract<FlowEvent, { type: K }> => event.type === type),
  };
}

/**
 * `disaggregate` with test defaults: the client request above on a fresh context, the vLLM
 * connector, a prefill worker that hands off and a decode worker that streams two tokens, a
 * logger that records; any option can be replaced.
 */
export function runFlow<P = unknown, D = unknown>(options: Partial<DisaggregateOptions<P, D>> = {}) {
  return disaggregate<P, D>({
    request: client,
    context: new Controller(),
    prefill: prefillWithParams().run,
    decode: decodeTokens().run,
    connector: vllmNixl,
    logger: recordingLogger().logger,
    ...options,
  });
}

/**
 * An engine whose dispatch answers only when the test calls `open()`, with `source` as the
 * stream; `contexts` records the context of every call.
 */
export function heldEngine(source: ScriptedSource) {
  let release: (() => void) | undefined;
  const contexts: AsyncEngineContext[] = [];
  const run: Engine<unknown> = (_, context) => {
    contexts.push(context);
    return new Promise((resolve) => {
      release = () => resolve(new ResponseStream(source, context));
    });
  };
  return { run, contexts, open: () => release?.() };
}
