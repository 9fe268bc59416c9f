// Many models behind one router: `pools`, one per model, through `disagg serve`'s core and the
// openai client. Each model's requests reach only its pool's workers; /v1/models lists every
// pool's; a model no pool serves is a 404 naming those served, before any worker.
import OpenAI from 'openai';
import { afterEach, describe, expect, it } from 'vitest';
import { ConfigError } from '../../../src/server/options.js';
import { createProxy, type ProxyServer } from '../../../src/server/proxy.js';
import type { FakeWorker } from '../../../src/testing/fake-worker.js';
import { eventuallyAsync, fakeWorkers } from '../../support/http.js';

const fakes = fakeWorkers();
let proxies: ProxyServer[] = [];
afterEach(async () => {
  await Promise.all(proxies.map((proxy) => proxy.close({ gracePeriodMs: 0, drainDelayMs: 0 })));
  proxies = [];
});

/** Three pools: `big` disaggregated on vLLM, `small` and `embed` each on one worker alone. */
async function fleet() {
  const bigPrefill = await fakes.start({ role: 'prefill', protocol: 'vllm', model: 'big' });
  const bigDecode = await fakes.start({ role: 'decode', protocol: 'vllm', model: 'big', tokens: 3 });
  const small = await fakes.start({ role: 'decode', protocol: 'vllm', model: 'small', tokens: 2 });
  const embed = await fakes.start({ role: 'decode', protocol: 'vllm', model: 'embed' });
  const proxy = createProxy({
    connector: 'vllm',
    pools: [
      { model: 'big', prefill: [bigPrefill.url], decode: [bigDecode.url] },
      { model: 'small', decode: [small.url], decodePolicy: 'round-robin' },
      { model: ['embed'], decode: [{ url: embed.url, name: 'embedder' }] },
    ],
  });
  proxies.push(proxy);
  const url = await proxy.listen(0, '127.0.0.1');
  const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'unused', maxRetries: 0 });
  const paths = (worker: FakeWorker) => worker.requests.map((record) => `${record.path} ${String(record.body.model)}`);
  return { url, client, bigPrefill, bigDecode, small, embed, paths };
}

/** Two pools, `chat-v1` and `chat-v2`, and a rewrite of `chat` to them by `weights`. */
async function canary(weights: [number, number], options: Partial<Parameters<typeof createProxy>[0]> = {}) {
  const stable = await fakes.start({ role: 'decode', protocol: 'vllm', model: 'chat-v1', tokens: 1 });
  const next = await fakes.start({ role: 'decode', protocol: 'vllm', model: 'chat-v2', tokens: 1 });
  const proxy = createProxy({
    connector: 'vllm',
    pools: [
      { model: 'chat-v1', decode: [stable.url] },
      { model: 'chat-v2', decode: [next.url] },
    ],
    rewrites: [
      {
        model: 'chat',
        targets: [
          { model: 'chat-v1', weight: weights[0] },
          { model: 'chat-v2', weight: weights[1] },
        ],
      },
    ],
    ...options,
  });
  proxies.push(proxy);
  return { url: await proxy.listen(0, '127.0.0.1'), stable, next };
}

describe('pools per model: one router in front of several models', () => {
  it("each model's chat, completions and embeddings reach only its pool's workers, disaggregated where the pool has prefill workers", async () => {
    const { client, bigPrefill, bigDecode, small, embed, paths } = await fleet();
    const bigChat = await client.chat.completions
      .create({ model: 'big', messages: [{ role: 'user', content: 'Hi' }] })
      .withResponse();
    expect(bigChat.data.choices[0]?.message.content).toBe('tok0 tok1 tok2 ');
    expect(bigChat.response.headers.get('x-disagg-strategy')).toBe('disaggregated-sequential');
    await client.completions.create({ model: 'big', prompt: 'Hi', max_tokens: 2 });
    const smallChat = await client.chat.completions
      .create({ model: 'small', messages: [{ role: 'user', content: 'Hi' }] })
      .withResponse();
    expect(smallChat.response.headers.get('x-disagg-strategy')).toBe('skipped-prefill');
    await client.completions.create({ model: 'small', prompt: 'Hi', max_tokens: 2 });
    const vectors = await client.embeddings.create({ model: 'embed', input: ['one', 'two'] });
    expect(vectors.data).toHaveLength(2);
    expect(paths(bigPrefill)).toEqual(['/v1/chat/completions big', '/v1/completions big']);
    expect(paths(bigDecode)).toEqual(['/v1/chat/completions big', '/v1/completions big']);
    expect(paths(small)).toEqual(['/v1/chat/completions small', '/v1/completions small']);
    expect(paths(embed)).toEqual(['/v1/embeddings embed']);
  });

  it("the workers of each pool in /metrics, labelled by the pool's model", async () => {
    const { url } = await fleet();
    const metrics = await (await fetch(`${url}/metrics`)).text();
    for (const line of [
      'disagg_pool_workers{pool="big",role="prefill",state="ready"} 1',
      'disagg_pool_workers{pool="big",role="decode",state="ready"} 1',
      'disagg_pool_workers{pool="small",role="prefill",state="ready"} 0',
      'disagg_pool_workers{pool="small",role="decode",state="ready"} 1',
      'disagg_pool_workers{pool="embed",role="decode",state="ready"} 1',
    ]) {
      expect(metrics).toContain(line);
    }
  });

  it("/v1/models lists every pool's models; one model is asked of its pool", async () => {
    const { client } = await fleet();
    const listed = await client.models.list();
    expect(listed.data.map((model) => model.id).sort()).toEqual(['big', 'embed', 'small']);
    expect((await client.models.retrieve('small')).id).toBe('small');
  });

  it("a LoRA adapter is served by the pool of its base, as the workers' /v1/models list it (parent)", async () => {
    const base = await fakes.start({
      role: 'decode',
      protocol: 'vllm',
      model: 'big',
      lora: { max: 2, running: ['big-sql'] },
    });
    const other = await fakes.start({ role: 'decode', protocol: 'vllm', model: 'small' });
    const proxy = createProxy({
      connector: 'vllm',
      pools: [
        { model: 'small', decode: [other.url] },
        { model: 'big', decode: [base.url] },
      ],
    });
    proxies.push(proxy);
    const url = await proxy.listen(0, '127.0.0.1');
    const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'unused', maxRetries: 0 });
    const listed = await client.models.list();
    expect(listed.data.find((model) => model.id === 'big-sql')).toMatchObject({ parent: 'big' });
    await client.completions.create({ model: 'big-sql', prompt: 'SELECT', max_tokens: 1 });
    expect(base.requests.map((record) => record.body.model)).toEqual(['big-sql']);
    expect(other.requests).toEqual([]);
  });

  it('the admin API adds a worker to the pool of the model it names; a model no pool serves is a 400 listing them', async () => {
    const small = await fakes.start({ role: 'decode', protocol: 'vllm', model: 'small', tokens: 1 });
    const big = await fakes.start({ role: 'decode', protocol: 'vllm', model: 'big', tokens: 1 });
    const more = await fakes.start({ role: 'decode', protocol: 'vllm', model: 'small', tokens: 1 });
    const proxy = createProxy({
      connector: 'vllm',
      adminKey: 'sk-admin-0001',
      pools: [
        { model: 'big', decode: [big.url] },
        { model: 'small', decode: [small.url], decodePolicy: 'round-robin' },
      ],
    });
    proxies.push(proxy);
    const url = await proxy.listen(0, '127.0.0.1');
    const admin = (body: object) =>
      fetch(`${url}/admin/workers`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: 'Bearer sk-admin-0001' },
        body: JSON.stringify(body),
      });
    const added = await admin({ role: 'decode', url: more.url, model: 'small' });
    expect(added.status).toBe(201);
    const refused = await admin({ role: 'decode', url: 'http://127.0.0.1:1', model: 'huge' });
    expect(refused.status).toBe(400);
    expect(((await refused.json()) as { error: { message: string } }).error.message).toBe(
      'No pool serves the model "huge": pools serve big, small',
    );
    const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'unused', maxRetries: 0 });
    for (let i = 0; i < 4; i++) await client.completions.create({ model: 'small', prompt: 'Hi', max_tokens: 1 });
    expect([small.requests.length, more.requests.length, big.requests.length]).toEqual([2, 2, 0]);
  });

  it('a model no pool serves is a 404 naming those served, before any worker', async () => {
    const { client, bigPrefill, bigDecode, small, embed } = await fleet();
    const error = await client.chat.completions
      .create({ model: 'huge', messages: [{ role: 'user', content: 'Hi' }] })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OpenAI.NotFoundError);
    expect((error as Error).message).toContain("The model 'huge' does not exist: this router serves big, small, embed");
    expect((error as InstanceType<typeof OpenAI.NotFoundError>).code).toBe('model_not_found');
    const retrieved = await client.models.retrieve('huge').catch((e: unknown) => e);
    expect(retrieved).toBeInstanceOf(OpenAI.NotFoundError);
    for (const worker of [bigPrefill, bigDecode, small, embed]) expect(worker.requests).toEqual([]);
  });

  it('the top-level workers serve every model no pool names', async () => {
    const other = await fakes.start({ role: 'decode', protocol: 'vllm', tokens: 1 });
    const otherPrefill = await fakes.start({ role: 'prefill', protocol: 'vllm' });
    const small = await fakes.start({ role: 'decode', protocol: 'vllm', model: 'small', tokens: 1 });
    const proxy = createProxy({
      connector: 'vllm',
      prefill: [{ url: otherPrefill.url }],
      decode: [{ url: other.url }],
      pools: [{ model: 'small', decode: [small.url] }],
    });
    proxies.push(proxy);
    const url = await proxy.listen(0, '127.0.0.1');
    const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'unused', maxRetries: 0 });
    await client.completions.create({ model: 'anything', prompt: 'Hi', max_tokens: 1 });
    await client.completions.create({ model: 'small', prompt: 'Hi', max_tokens: 1 });
    expect(other.requests.map((record) => record.body.model)).toEqual(['anything']);
    expect(small.requests.map((record) => record.body.model)).toEqual(['small']);
  });

  it("a weighted canary splits sessions by its weights, each session on one target, the body's model rewritten and counted", async () => {
    const { url, stable, next } = await canary([80, 20]);
    const sessions = 300;
    const targetOf = new Map<string, Set<string>>();
    for (let turn = 0; turn < 2; turn++) {
      for (let i = 0; i < sessions; i++) {
        const answer = await fetch(`${url}/v1/completions`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', 'x-session-id': `s${i}` },
          body: JSON.stringify({ model: 'chat', prompt: 'Hi', max_tokens: 1 }),
        });
        const body = (await answer.json()) as { model: string };
        const seen = targetOf.get(`s${i}`) ?? new Set();
        seen.add(body.model);
        targetOf.set(`s${i}`, seen);
      }
    }
    // Each session on one target, both turns.
    expect([...targetOf.values()].every((seen) => seen.size === 1)).toBe(true);
    const onNext = [...targetOf.values()].filter((seen) => seen.has('chat-v2')).length;
    expect(Math.abs(onNext / sessions - 0.2)).toBeLessThan(0.06);
    // The workers were asked for their own model: the body's model rewritten, nothing else.
    expect(next.requests.every((record) => record.body.model === 'chat-v2' && record.body.prompt === 'Hi')).toBe(true);
    expect(stable.requests.length + next.requests.length).toBe(2 * sessions);
    const metrics = await (await fetch(`${url}/metrics`)).text();
    expect(metrics).toContain(`disagg_model_rewrites_total{model="chat",target="chat-v2"} ${2 * onNext}`);
    // A model no rule names goes as asked.
    const direct = await fetch(`${url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'chat-v2', prompt: 'Hi', max_tokens: 1 }),
    });
    expect(((await direct.json()) as { model: string }).model).toBe('chat-v2');
  });

  it("a trusted caller picks a rewrite's target with x-disagg-model-rewrite; an untrusted one's header is ignored", async () => {
    // Only the gateway's key may name a tenant: it is the trusted caller.
    const { url } = await canary([1, 0.000001], { tenantHeaderKeys: ['sk-gateway-0001'] });
    const ask = async (headers: Record<string, string>) => {
      const answer = await fetch(`${url}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-session-id': 's1', ...headers },
        body: JSON.stringify({ model: 'chat', prompt: 'Hi', max_tokens: 1 }),
      });
      return {
        status: answer.status,
        body: (await answer.json()) as { model?: string; error?: { message: string; param: string } },
      };
    };
    expect((await ask({})).body.model).toBe('chat-v1');
    const picked = await ask({ 'x-disagg-model-rewrite': 'chat-v2', authorization: 'Bearer sk-gateway-0001' });
    expect(picked.body.model).toBe('chat-v2');
    // Not the gateway: the header is not its to give.
    expect((await ask({ 'x-disagg-model-rewrite': 'chat-v2', authorization: 'Bearer sk-other' })).body.model).toBe(
      'chat-v1',
    );
    const wrong = await ask({ 'x-disagg-model-rewrite': 'gpt-9', authorization: 'Bearer sk-gateway-0001' });
    expect(wrong.status).toBe(400);
    expect(wrong.body.error).toMatchObject({ param: 'x-disagg-model-rewrite' });
    expect(wrong.body.error?.message).toContain('"gpt-9", which is no target of chat: chat-v1, chat-v2');
  });

  it("each pool finds its own workers (decodeDns per pool), and no pool's source drains another's", async () => {
    let lookups = 0;
    const big = await fakes.start({ role: 'decode', protocol: 'vllm', model: 'big', tokens: 1 });
    const small = await fakes.start({ role: 'decode', protocol: 'vllm', model: 'small', tokens: 1 });
    const proxy = createProxy({
      connector: 'vllm',
      discovery: { dnsIntervalMs: 10 },
      pools: [
        { model: 'big', decodeDns: `http://big-decode.llm.svc:${big.port}` },
        { model: 'small', decodeDns: `http://small-decode.llm.svc:${small.port}` },
      ],
      // Both names resolve to loopback: each pool's port tells its worker apart.
      dnsLookup: async () => {
        lookups++;
        return [{ address: '127.0.0.1' }];
      },
      adminKey: 'sk-admin-0001',
    });
    proxies.push(proxy);
    const url = await proxy.listen(0, '127.0.0.1');
    const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'unused', maxRetries: 0 });
    const listed = async () => {
      const answer = await fetch(`${url}/admin/workers`, { headers: { authorization: 'Bearer sk-admin-0001' } });
      const { decode } = (await answer.json()) as { decode: Array<{ url: string; state: string }> };
      return JSON.stringify(decode.map((worker) => `${worker.url} ${worker.state}`).sort());
    };
    const both = JSON.stringify([`${big.url} ready`, `${small.url} ready`].sort());
    await eventuallyAsync(async () => (await listed()) === both, 'each pool found its worker');
    // Many rounds of both sources later, each worker is still in its own pool, in rotation.
    const after = lookups;
    await eventuallyAsync(async () => lookups > after + 20, 'more rounds of both sources');
    expect(await listed()).toBe(both);
    await client.completions.create({ model: 'big', prompt: 'Hi', max_tokens: 1 });
    await client.completions.create({ model: 'small', prompt: 'Hi', max_tokens: 1 });
    expect(big.requests.map((record) => record.body.model)).toEqual(['big']);
    expect(small.requests.map((record) => record.body.model)).toEqual(['small']);
  });

  it("a pool's own deadlines and routing parameters, over the top level's", async () => {
    const prefill = await fakes.start({ role: 'prefill', protocol: 'vllm' });
    const slowPrefill = await fakes.start({ role: 'prefill', protocol: 'vllm' });
    const slow = await fakes.start({
      role: 'decode',
      protocol: 'vllm',
      model: 'slow',
      tokens: 50,
      tokenIntervalMs: 20,
    });
    const quick = await fakes.start({
      role: 'decode',
      protocol: 'vllm',
      model: 'quick',
      tokens: 50,
      tokenIntervalMs: 20,
    });
    const proxy = createProxy({
      connector: 'vllm',
      pools: [
        // Its requests have 100 ms in all; short prompts are served on decode alone.
        {
          model: 'quick',
          prefill: [prefill.url],
          decode: [quick.url],
          deadlines: { totalMs: 100 },
          routing: { aggregateBelowChars: 1000 },
        },
        { model: 'slow', prefill: [slowPrefill.url], decode: [slow.url] },
      ],
    });
    proxies.push(proxy);
    const url = await proxy.listen(0, '127.0.0.1');
    const ask = (model: string) =>
      fetch(`${url}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model, prompt: 'Hi', max_tokens: 50 }),
      });
    const cut = await ask('quick');
    expect(cut.status).toBe(504);
    expect(cut.headers.get('x-disagg-strategy')).toBe('skipped-prefill');
    const whole = await ask('slow');
    expect(whole.status).toBe(200);
    expect(whole.headers.get('x-disagg-strategy')).toBe('disaggregated-sequential');
    expect(() =>
      createProxy({ connector: 'vllm', pools: [{ model: 'm', decode: ['http://d:8000'], deadlines: { totalMS: 5 } }] }),
    ).toThrow('unknown deadlines setting "totalMS"; did you mean "totalMs"?');
    expect(() =>
      createProxy({
        connector: 'vllm',
        pools: [{ model: 'm', decode: ['http://d:8000'], routing: { sessionHeader: 'x' } }],
      }),
    ).toThrow('unknown routing setting "sessionHeader"');
  });

  it('a pool that does not check is one line naming it: no model, no decode worker, an unknown field, a model twice', () => {
    const refusal = (pools: unknown) => {
      try {
        createProxy({ connector: 'vllm', pools: pools as never });
        return undefined;
      } catch (error) {
        expect(error).toBeInstanceOf(ConfigError);
        return (error as Error).message;
      }
    };
    expect(refusal([{ decode: ['http://d:8000'] }])).toContain('has a pool (#1) whose model is undefined');
    expect(refusal([{ model: 'm', decode: [] }])).toContain(
      'has a pool (m) without decode workers: give it at least one (or decodeDns or decodeSelector to find them)',
    );
    expect(refusal([{ model: 'm', decode: ['http://d:8000'], decodePolicey: 'x' }])).toContain(
      'unknown field "decodePolicey"; did you mean "decodePolicy"?',
    );
    expect(
      refusal([
        { model: 'm', decode: ['http://d:8000'] },
        { model: ['n', 'm'], decode: ['http://e:8000'] },
      ]),
    ).toContain('names the model "m" in two pools (#1 and #2)');
  });
});
