// What becomes of a worker's own words: a client still gets them (a worker's 4xx is the
// request's fault, told as the worker told it), without any address they hold.
import OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import type { EngineName } from '../../src/engines/registry.js';
import { proxyHarness } from '../support/proxy.js';

const { setup, fakes } = proxyHarness();

/** The failure the openai client threw for a request through the proxy. */
async function failureOf(client: OpenAI, stream = false): Promise<InstanceType<typeof OpenAI.APIError>> {
  const error = await client.completions
    .create({ model: 'fake-model', prompt: 'Say', max_tokens: 2, stream })
    .then(async (answer) => {
      if (stream) for await (const _ of answer as AsyncIterable<unknown>);
      return answer;
    })
    .catch((e: unknown) => e);
  expect(error).toBeInstanceOf(OpenAI.APIError);
  return error as InstanceType<typeof OpenAI.APIError>;
}

/** A peer no pool lists: vLLM's decode failing to reach its KV peer says so in its own words. */
const PEER = 'connect ECONNREFUSED 10.0.3.7:8998';

describe("an address inside a worker's own words never reaches a client", () => {
  for (const protocol of ['vllm', 'sglang'] as const satisfies readonly EngineName[]) {
    it(`${protocol}: a decode 500 whose text names an unknown peer is a 502 without the address`, async () => {
      const { client, prefill } = await setup(protocol, {
        decode: { fault: { type: 'status', status: 500, message: `KV transfer failed: ${PEER}` } },
      });
      // SGLang's prefill keeps the KV for a decode that never came to take it: its own timeout frees it.
      if (protocol === 'sglang') fakes.leaveKv(prefill);
      const error = await failureOf(client);
      expect(error.status).toBe(502);
      expect(error.message).toContain('KV transfer failed: connect ECONNREFUSED worker');
      expect(error.message).not.toMatch(/10\.0\.3\.7|8998/);
    });

    it(`${protocol}: a prefill 400 whose text names an unknown address keeps its status and words, not the address`, async () => {
      const { client } = await setup(protocol, {
        prefill: {
          fault: {
            type: 'status',
            status: 400,
            message: 'image_url http://10.0.3.7:8998/cat.png could not be fetched',
          },
        },
      });
      const error = await failureOf(client, true);
      expect(error.status).toBe(400);
      expect(error.message).toContain('image_url worker/cat.png could not be fetched');
      expect(error.message).not.toMatch(/10\.0\.3\.7|8998/);
    });
  }
});
