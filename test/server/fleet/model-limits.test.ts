import { MockAgent } from 'undici';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { ServedModels } from '../../../src/server/fleet/model-limits.js';

const agents: MockAgent[] = [];
afterEach(async () => {
  await Promise.all(agents.splice(0).map((agent) => agent.close()));
});

/** ServedModels over mock workers: each origin answers /v1/models with `answers[origin]`. */
function served(answers: Record<string, { status?: number; body?: unknown }>) {
  const agent = new MockAgent();
  agent.disableNetConnect();
  agents.push(agent);
  const seen: Array<{ origin: string; headers: Record<string, string> }> = [];
  for (const [origin, answer] of Object.entries(answers)) {
    agent
      .get(origin)
      .intercept({ path: '/v1/models', method: 'GET' })
      .reply((options) => {
        seen.push({ origin, headers: options.headers as Record<string, string> });
        const body = answer.body ?? {};
        return { statusCode: answer.status ?? 200, data: typeof body === 'string' ? body : JSON.stringify(body) };
      });
  }
  const logs: Array<{ fields: object; message: string | undefined }> = [];
  const record = (fields: object, message?: string) => logs.push({ fields, message });
  const models = new ServedModels({
    headers: { authorization: 'Bearer worker-key' },
    dispatcher: agent,
    logger: { error: record, warn: record, info: record, debug: record },
  });
  return { models, seen, logs, agent };
}

const list = (...entries: unknown[]) => ({ object: 'list', data: entries });

describe('ServedModels', () => {
  it('knows each model by the context its workers report, the smallest when they differ', async () => {
    const { models, seen } = served({
      'http://a': { body: list({ id: 'llama', max_model_len: 4096 }, { id: 'qwen', max_model_len: 32768 }) },
      'http://b': { body: list({ id: 'llama', max_model_len: 2048 }) },
      'http://c': { body: list({ id: 'llama', max_model_len: 8192 }) },
    });
    await models.refresh([{ url: 'http://a' }, { url: 'http://b/' }, { url: 'http://c' }]);
    expect(models.maxModelLen('llama')).toBe(2048);
    expect(models.maxModelLen('qwen')).toBe(32768);
    expect(models.maxModelLen('other')).toBeUndefined();
    expect(seen.map((each) => each.headers.authorization)).toEqual(Array(3).fill('Bearer worker-key'));
  });

  it('each worker may take timeoutMs to answer (2 s by default)', async () => {
    const timeout = vi.spyOn(AbortSignal, 'timeout');
    const { models } = served({ 'http://a': { body: list() }, 'http://b': { body: list() } });
    await models.refresh([{ url: 'http://a' }]);
    await models.refresh([{ url: 'http://b' }], 300);
    expect(timeout.mock.calls).toEqual([[2000], [300]]);
  });

  it('a request without a model gets the only model known; with two known, none', async () => {
    const one = served({ 'http://a': { body: list({ id: 'llama', max_model_len: 4096 }) } });
    expect(one.models.maxModelLen(undefined)).toBeUndefined();
    await one.models.refresh([{ url: 'http://a' }]);
    expect(one.models.maxModelLen(undefined)).toBe(4096);
    expect(one.models.maxModelLen(null)).toBe(4096);
    expect(one.models.maxModelLen(7)).toBeUndefined();
    const two = served({
      'http://a': { body: list({ id: 'llama', max_model_len: 4096 }, { id: 'qwen', max_model_len: 1024 }) },
    });
    await two.models.refresh([{ url: 'http://a' }]);
    expect(two.models.maxModelLen(undefined)).toBeUndefined();
  });

  it('entries without a name or a positive length add nothing; neither does a worker that answers otherwise', async () => {
    const { models, logs } = served({
      'http://a': {
        body: list(
          null,
          { id: 5, max_model_len: 100 },
          { id: 'no-length' },
          { id: 'zero', max_model_len: 0 },
          { id: 'nan', max_model_len: Number.NaN },
          { id: 'text', max_model_len: '100' },
          { id: 'good', max_model_len: 100 },
        ),
      },
      'http://b': { status: 500, body: list({ id: 'good', max_model_len: 10 }) },
      'http://c': { body: { data: { id: 'good', max_model_len: 10 } } },
      'http://d': { body: 'not json' },
      'http://e': { body: 'null' },
    });
    await models.refresh(['a', 'b', 'c', 'd', 'e'].map((name) => ({ url: `http://${name}` })));
    for (const model of ['no-length', 'zero', 'nan', 'text', '5']) expect(models.maxModelLen(model)).toBeUndefined();
    expect(models.maxModelLen('good')).toBe(100);
    expect(models.maxModelLen(undefined)).toBe(100);
    // Only a body that is not JSON is worth a word: the other answers are well formed, just empty.
    expect(logs.map((entry) => (entry.fields as { url?: string }).url)).toEqual(['http://d']);
  });

  it('a round in which no worker answers keeps the limits known before; one that does replaces them', async () => {
    const { models, agent, logs } = served({ 'http://a': { body: list({ id: 'llama', max_model_len: 4096 }) } });
    await models.refresh([{ url: 'http://a' }]);
    agent.get('http://a').intercept({ path: '/v1/models', method: 'GET' }).replyWithError(new Error('refused'));
    await models.refresh([{ url: 'http://a' }]);
    expect(models.maxModelLen('llama')).toBe(4096);
    expect(logs).toEqual([
      { fields: { url: 'http://a', err: expect.any(Error) }, message: 'Could not read the models of a worker' },
    ]);
    agent
      .get('http://a')
      .intercept({ path: '/v1/models', method: 'GET' })
      .reply(200, JSON.stringify(list({ id: 'qwen', max_model_len: 512 })));
    await models.refresh([{ url: 'http://a' }]);
    expect(models.maxModelLen('llama')).toBeUndefined();
    expect(models.maxModelLen('qwen')).toBe(512);
  });
});
