import { describe, expect, it } from 'vitest';
import { trtllmContextFirst } from '../../src/engines/registry.js';
import { disaggregate } from '../../src/flow/disaggregate.js';
import { WorkerPool } from '../../src/flow/worker-pool.js';
import { httpEngine } from '../../src/http/http-engine.js';
import { Controller } from '../../src/runtime/controller.js';
import { collect, recordingLogger } from '../support/async.js';
import { fakeWorkers } from '../support/http.js';
import { proxyHarness } from '../support/proxy.js';

const fakes = fakeWorkers();
const { setup } = proxyHarness();

describe('TensorRT-LLM (context first) over loopback HTTP', () => {
  it('context_only, then generation_only with the handoff found on the choice; no field the server refuses', async () => {
    const prefill = await fakes.start({ role: 'prefill', protocol: 'trtllm' });
    const decode = await fakes.start({ role: 'decode', protocol: 'trtllm', tokens: 3 });
    const engine = httpEngine<{ url: string }>();
    for (const request of [
      { model: 'm', prompt: 'Tell me', max_tokens: 16, stream: true },
      { model: 'm', messages: [{ role: 'user', content: 'Hi' }], max_completion_tokens: 8 },
    ]) {
      const items = await collect(
        await disaggregate({
          request,
          context: new Controller(),
          prefill: engine,
          decode: engine,
          connector: trtllmContextFirst,
          prefillWorkers: new WorkerPool([{ url: prefill.url }]),
          decodeWorkers: new WorkerPool([{ url: decode.url }]),
          logger: recordingLogger().logger,
        }),
      );
      expect(items.at(-1)?.data?.finish_reason).toBeDefined();
    }
    expect(prefill.ledger.claimed()).toHaveLength(2);
    expect(
      decode.requests.map((entry) => (entry.body.disaggregated_params as { request_type: string }).request_type),
    ).toEqual(['generation_only', 'generation_only']);
    // What the context server got: the client's fields and the handoff, nothing it would refuse.
    expect(Object.keys(prefill.requests[0]?.body ?? {}).sort()).toEqual([
      'disaggregated_params',
      'max_tokens',
      'model',
      'prompt',
      'stream',
    ]);
  });

  it('through disagg serve: a chat completion streamed with the official client', async () => {
    const { client, prefill } = await setup('trtllm');
    const stream = await client.chat.completions.create({
      model: 'm',
      messages: [{ role: 'user', content: 'Hi' }],
      stream: true,
    });
    let text = '';
    for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? '';
    expect(text).toBe('tok0 tok1 tok2 tok3 ');
    expect(prefill.ledger.claimed()).toHaveLength(1);
  });
});
