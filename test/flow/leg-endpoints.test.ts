// The flow tells each engine call which API its body is for: no engine works it out again from
// the body's shape. Both legs get the request's endpoint, the release of a handoff too; the
// token-id completion that resumes a migrated stream gets completions.
import { describe, expect, it } from 'vitest';
import type { Endpoint } from '../../src/endpoints/endpoint.js';
import { endpointNamed } from '../../src/endpoints/registry.js';
import type { Engine } from '../../src/flow/disaggregate.js';
import { WorkerPool } from '../../src/flow/worker-pool.js';
import { Annotated } from '../../src/protocol/annotated.js';
import { LLMEngineOutput } from '../../src/protocol/llm-engine-output.js';
import type { Controller } from '../../src/runtime/controller.js';
import { ResponseStream } from '../../src/runtime/response-stream.js';
import { collect, flush, ScriptedSource } from '../support/async.js';
import { decodeTokens, engine, kvParams, prefillWithParams, runFlow } from '../support/flow.js';

const messages = [{ role: 'user', content: 'Hi' }];
const names = (calls: ReadonlyArray<{ endpoint: Endpoint | undefined }>) => calls.map((call) => call.endpoint?.name);

describe('the endpoint of each engine call, named by the flow', () => {
  it('both legs are told the endpoint the request came in on, not one read off the body', async () => {
    // An Anthropic Messages body looks like chat's: only the endpoint given says which it is.
    const prefill = prefillWithParams();
    const decode = decodeTokens();
    await collect(
      await runFlow({
        request: { model: 'm', messages, max_tokens: 8, stream: true },
        endpoint: endpointNamed('messages'),
        prefill: prefill.run,
        decode: decode.run,
      }),
    );
    expect(names(prefill.calls)).toEqual(['messages']);
    expect(names(decode.calls)).toEqual(['messages']);
  });

  it("a library caller that gives only a body gets its legs told the body's endpoint", async () => {
    const prefill = prefillWithParams();
    const decode = decodeTokens();
    await collect(
      await runFlow({ request: { model: 'm', messages, stream: true }, prefill: prefill.run, decode: decode.run }),
    );
    expect(names([...prefill.calls, ...decode.calls])).toEqual(['chat', 'chat']);
  });

  it("the release of a handoff prefill finished itself goes to the decode worker on the request's endpoint", async () => {
    const pinned = { ...kvParams, do_remote_prefill: true, do_remote_decode: false };
    const prefill = engine(() =>
      new ScriptedSource([
        Annotated.fromData<LLMEngineOutput>({ token_ids: [2], finish_reason: 'stop', disaggregated_params: pinned }),
      ]).end(),
    );
    const released: Array<Endpoint | undefined> = [];
    const decode: Engine<unknown> = async (_body, _context, _worker, endpoint) => {
      released.push(endpoint);
      throw new Error('refused');
    };
    await collect(
      await runFlow({
        request: { model: 'm', messages, max_tokens: 8, stream: true },
        endpoint: endpointNamed('chat'),
        prefill: prefill.run,
        decode,
        decodeWorkers: new WorkerPool(['d0']),
      }),
    );
    await flush();
    expect(released.map((endpoint) => endpoint?.name)).toEqual(['chat']);
  });

  it('a migrated chat stream is resumed as a token-id completion, and its engine is told completions', async () => {
    const piece = (id: number) => Annotated.fromData<LLMEngineOutput>({ token_ids: [id], text: `t${id} ` });
    const calls: Array<{ endpoint: Endpoint | undefined; body: Record<string, unknown> }> = [];
    const decode = async (body: Record<string, unknown>, context: Controller, worker: unknown, endpoint?: Endpoint) => {
      calls.push({ endpoint, body });
      const source =
        worker === 'd0'
          ? new ScriptedSource([piece(2000)]).fail(new Error('connection reset'))
          : new ScriptedSource([piece(2001)]).push(Annotated.fromData(LLMEngineOutput.length())).end();
      return new ResponseStream(source, context);
    };
    await collect(
      await runFlow<unknown, string>({
        request: { model: 'm', messages, max_tokens: 2, stream: true },
        endpoint: endpointNamed('chat'),
        promptTokenIds: [1, 2, 3],
        decode: decode as never,
        decodeWorkers: new WorkerPool(['d0', 'd1'], { selection: 'round-robin' }),
        skipPrefill: () => true,
        migration: { limit: 1 },
      }),
    );
    expect(names(calls)).toEqual(['chat', 'completions']);
    expect(calls[1]?.body).toMatchObject({ prompt: [1, 2, 3, 2000] });
    expect(calls[1]?.body).not.toHaveProperty('messages');
  });
});
