import { describe, expect, it } from 'vitest';
import { sglangBootstrap, vllmNixl } from '../../src/engines/registry.js';
import { disaggregate } from '../../src/flow/disaggregate.js';
import { withoutUsageChunks } from '../../src/flow/usage.js';
import { WorkerPool } from '../../src/flow/worker-pool.js';
import { httpEngine } from '../../src/http/http-engine.js';
import { Annotated } from '../../src/protocol/annotated.js';
import { LLMEngineOutput } from '../../src/protocol/llm-engine-output.js';
import { Controller } from '../../src/runtime/controller.js';
import { sseResponse } from '../../src/server/relay.js';
import { startFakeWorker } from '../../src/testing/index.js';

const usageChunk = { choices: [], usage: { prompt_tokens: 2, completion_tokens: 3, total_tokens: 5 } };

describe('withoutUsageChunks', () => {
  it("takes the usage-only chunk off an item's wire and keeps its data; an item without one is the same item", () => {
    const finish = { choices: [{ index: 0, text: '', finish_reason: 'stop' }] };
    const item = Annotated.withWire(
      Annotated.fromData<LLMEngineOutput>({ ...LLMEngineOutput.stop(), completion_usage: usageChunk.usage }),
      [
        { form: 'event', text: JSON.stringify(finish), json: finish },
        { form: 'event', text: JSON.stringify(usageChunk), json: usageChunk },
      ],
    );
    const stripped = withoutUsageChunks(item);
    expect(Annotated.wire(stripped)).toEqual([{ form: 'event', text: JSON.stringify(finish), json: finish }]);
    expect(stripped.data?.completion_usage).toEqual(usageChunk.usage);
    const plain = Annotated.withWire(Annotated.fromData<LLMEngineOutput>(LLMEngineOutput.stop()), [
      { form: 'event', text: JSON.stringify(finish), json: finish },
    ]);
    expect(withoutUsageChunks(plain)).toBe(plain);
  });
});

describe("usage: 'always': the workers report usage the client did not ask for, which the client never sees", () => {
  async function run(protocol: 'vllm' | 'sglang', request: Record<string, unknown>) {
    const prefill = await startFakeWorker({ role: 'prefill', protocol });
    const decode = await startFakeWorker({ role: 'decode', protocol, tokens: 3 });
    try {
      const engine = httpEngine();
      const stream = disaggregate({
        request,
        context: new Controller(),
        connector: protocol === 'vllm' ? vllmNixl : sglangBootstrap,
        prefill: engine,
        decode: engine,
        prefillWorkers: new WorkerPool([{ url: prefill.url, bootstrapPort: prefill.bootstrapPort }]),
        decodeWorkers: new WorkerPool([{ url: decode.url }]),
        usage: 'always',
      });
      const response = await sseResponse(stream, { request });
      const text = await response.text();
      const { usage } = await response.result;
      return { text, usage, decodeBody: decode.requests[0]?.body as Record<string, unknown> };
    } finally {
      await Promise.all([prefill.close(), decode.close()]);
    }
  }

  it.each(['vllm', 'sglang'] as const)(
    '%s: a streamed completion without include_usage: decode is asked, the client reads no usage chunk, the result has it',
    async (protocol) => {
      const { text, usage, decodeBody } = await run(protocol, {
        model: 'm',
        prompt: 'Say hi',
        max_tokens: 3,
        stream: true,
      });
      expect(decodeBody.stream_options).toEqual({ include_usage: true });
      expect(text).not.toContain('"usage"');
      expect(text).toContain('tok2');
      expect(text.endsWith('data: [DONE]\n\n')).toBe(true);
      expect(usage).toMatchObject({ completion_tokens: 3 });
    },
  );

  it('a streamed chat that asked for usage itself gets the usage chunk as the worker sent it', async () => {
    const request = {
      model: 'm',
      messages: [{ role: 'user', content: 'Say hi' }],
      stream: true,
      stream_options: { include_usage: true },
    };
    const { text, usage } = await run('vllm', request);
    const chunks = text
      .split('\n\n')
      .filter((line) => line.startsWith('data: {'))
      .map((line) => JSON.parse(line.slice(6)));
    expect(chunks.at(-1)).toMatchObject({ choices: [], usage: { completion_tokens: 3 } });
    expect(usage).toMatchObject({ completion_tokens: 3 });
  });

  it('a whole request is sent as it is (vLLM refuses stream_options without stream) and has its usage', async () => {
    const { decodeBody, usage } = await run('vllm', { model: 'm', prompt: 'Say hi', max_tokens: 3 });
    expect(decodeBody).not.toHaveProperty('stream_options');
    expect(usage).toMatchObject({ completion_tokens: 3 });
  });
});
