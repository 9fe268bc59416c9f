// The fake workers serve the endpoints of the registry, not a list of their own: a new endpoint
// is answered by every fake whose engine does not name it unsupported.
import { request } from 'undici';
import { describe, expect, it } from 'vitest';
import { ENDPOINTS, type EndpointName } from '../../src/endpoints/registry.js';
import { fakeSglang } from '../../src/engines/sglang/fake.js';
import { fakeTrtllm } from '../../src/engines/trtllm/fake.js';
import { fakeVllm } from '../../src/engines/vllm/fake.js';
import { type FakeProtocol, servedPaths } from '../../src/fakes/fake-protocol.js';
import type { FakeWorker } from '../../src/testing/index.js';
import { fakeWorkers } from '../support/http.js';

const fakes = fakeWorkers();

const messages = [{ role: 'user', content: 'Hi' }];

// A body each endpoint takes, keyed by the registry: a new endpoint does not compile here
// without its own.
const BODIES: { readonly [N in EndpointName]: Record<string, unknown> } = {
  completions: { prompt: 'Hi', max_tokens: 2 },
  chat: { messages, max_tokens: 2 },
  generate: { text: 'Hi', sampling_params: { max_new_tokens: 2 } },
  responses: { input: 'Hi', max_output_tokens: 2 },
  messages: { messages, max_tokens: 2 },
  embeddings: { input: 'Hi' },
  rerank: { query: 'Hi', documents: ['a', 'b'] },
  score: { text_1: 'Hi', text_2: 'there' },
  classify: { input: 'Hi' },
  pooling: { input: 'Hi' },
  count_tokens: { messages },
  tokenize: { prompt: 'Hi' },
  detokenize: { tokens: [1000, 1001] },
};

async function post(worker: FakeWorker, path: string, body: object): Promise<{ status: number; text: string }> {
  const answer = await request(`${worker.url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  return { status: answer.statusCode, text: await answer.body.text() };
}

describe("the fakes' routes, derived from the endpoints' registry", () => {
  for (const protocol of [fakeVllm, fakeSglang, fakeTrtllm]) {
    it(`a ${protocol.name} fake answers every endpoint its engine serves, and 404s those it names unsupported`, async () => {
      const worker = await fakes.start({ role: 'decode', protocol: protocol.name, tokens: 1 });
      for (const endpoint of ENDPOINTS) {
        const answer = await post(worker, endpoint.path, { model: 'fake-model', ...BODIES[endpoint.name] });
        if (Object.hasOwn(protocol.unsupported, endpoint.name)) {
          expect({ name: endpoint.name, status: answer.status }).toEqual({ name: endpoint.name, status: 404 });
          expect(answer.text).toContain(`no route POST ${endpoint.path}`);
        } else {
          expect({ name: endpoint.name, status: answer.status }).toEqual({ name: endpoint.name, status: 200 });
        }
      }
    });
  }

  it('what each engine leaves out is its own, and every other endpoint is served', () => {
    const served = (protocol: FakeProtocol) =>
      ENDPOINTS.filter((endpoint) => servedPaths(protocol).has(endpoint.path)).map((endpoint) => endpoint.name);
    expect(Object.keys(fakeVllm.unsupported)).toEqual(['generate']);
    expect(Object.keys(fakeSglang.unsupported)).toEqual(['pooling']);
    expect(served(fakeTrtllm)).toEqual(['completions', 'chat', 'messages']);
    // An endpoint the registry gains is served unless an engine names it.
    expect(servedPaths({ unsupported: {} })).toEqual(new Set(ENDPOINTS.map((endpoint) => endpoint.path)));
  });
});
