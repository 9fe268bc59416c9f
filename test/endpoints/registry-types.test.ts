import { describe, expect, expectTypeOf, it } from 'vitest';
import type { Endpoint } from '../../src/endpoints/endpoint.js';
import {
  ENDPOINTS,
  type EndpointName,
  endpointNamed,
  endpointOf,
  type GenerationName,
  type RegisteredEndpoint,
} from '../../src/endpoints/registry.js';
import type { FakeFormat, FakeFormats, PoolingAnswer } from '../../src/fakes/fake-formats.js';

// The names are derived from the registry's list by the compiler: these checks fail `tsc`
// (the suite's typecheck), not the run, when the derivation loses a literal.
describe("the registry's names, derived by the compiler from its list", () => {
  it('EndpointName is the union of the literal names of ENDPOINTS, GenerationName those of the disaggregated ones', () => {
    expectTypeOf<EndpointName>().toEqualTypeOf<
      | 'completions'
      | 'chat'
      | 'generate'
      | 'responses'
      | 'messages'
      | 'embeddings'
      | 'rerank'
      | 'score'
      | 'classify'
      | 'pooling'
      | 'count_tokens'
      | 'tokenize'
      | 'detokenize'
    >();
    expectTypeOf<GenerationName>().toEqualTypeOf<'completions' | 'chat' | 'generate' | 'responses' | 'messages'>();
    expect(ENDPOINTS.filter((each) => each.serving === 'disaggregated').map((each) => each.name)).toEqual([
      'completions',
      'chat',
      'generate',
      'responses',
      'messages',
    ]);
  });

  it('an endpoint keeps its literal name through the lookups: no cast to read it as a name of the registry', () => {
    expectTypeOf(endpointNamed('chat')).toEqualTypeOf<Endpoint<'chat'>>();
    expectTypeOf(endpointNamed('chat').name).toEqualTypeOf<'chat'>();
    expectTypeOf(endpointNamed(String('chat'))).toEqualTypeOf<RegisteredEndpoint>();
    expectTypeOf(endpointOf({ prompt: 'Hi' }).name).toEqualTypeOf<GenerationName>();
    expectTypeOf<RegisteredEndpoint['name']>().toEqualTypeOf<EndpointName>();
    // A registry entry is an Endpoint of its own name, and any Endpoint is one of a string name.
    expectTypeOf<(typeof ENDPOINTS)[number]>().toMatchTypeOf<RegisteredEndpoint>();
    expectTypeOf<Endpoint<'chat'>>().toMatchTypeOf<Endpoint>();
    expect(endpointNamed('chat').name).toBe('chat');
  });

  it("the fakes' answer table has one entry per endpoint, of the serving the endpoint declares", () => {
    expectTypeOf<keyof FakeFormats>().toEqualTypeOf<EndpointName>();
    expectTypeOf<FakeFormats['chat']['serving']>().toEqualTypeOf<'disaggregated'>();
    expectTypeOf<FakeFormats['embeddings']['serving']>().toEqualTypeOf<'passthrough'>();
    const answer = (): PoolingAnswer => ({ status: 200, body: {} });
    // @ts-expect-error: a table without every endpoint's format does not compile
    const partial: FakeFormats = { embeddings: { serving: 'passthrough', answer } };
    // @ts-expect-error: nor one that answers a passthrough as a generation
    const wrong: FakeFormats['tokenize'] = { serving: 'disaggregated', format: undefined as never };
    expectTypeOf<FakeFormats[EndpointName]>().toMatchTypeOf<FakeFormat>();
    expect([partial, wrong]).toHaveLength(2);
  });
});
