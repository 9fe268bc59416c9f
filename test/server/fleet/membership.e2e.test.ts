import OpenAI from 'openai';
import { request } from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import { createProxy, type ProxyOptions, type ProxyServer } from '../../../src/server/proxy.js';
import { recordingLogger } from '../../support/async.js';
import { eventuallyAsync, fakeWorkers } from '../../support/http.js';
import { kubeConfigFor, type StandInPod, startKubernetesApi } from '../../support/kubernetes-api.js';

const fakes = fakeWorkers();
let proxies: ProxyServer[] = [];
afterEach(async () => {
  await Promise.all(proxies.map((proxy) => proxy.close({ gracePeriodMs: 0, drainDelayMs: 0 })));
  proxies = [];
});

const ADMIN = { authorization: 'Bearer admin-secret' };

async function start(options: Partial<ProxyOptions> = { adminKey: 'admin-secret' }, decodeTokens = 2) {
  const logger = recordingLogger();
  const prefill = await fakes.start({ role: 'prefill', protocol: 'vllm' });
  const decode = await fakes.start({ role: 'decode', protocol: 'vllm', tokens: decodeTokens });
  const proxy = createProxy({
    connector: 'vllm',
    prefill: [{ url: prefill.url }],
    decode: [{ url: decode.url }],
    selection: 'round-robin',
    logger: logger.logger,
    ...options,
  });
  proxies.push(proxy);
  const url = await proxy.listen(0);
  const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'x', maxRetries: 0 });
  /** One admin call: status and JSON body. */
  async function admin(method: 'GET' | 'POST' | 'DELETE', path: string, body?: unknown, headers = ADMIN) {
    const answer = await request(`${url}${path}`, {
      method,
      headers: { ...headers, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      ...(body === undefined ? {} : { body: typeof body === 'string' ? body : JSON.stringify(body) }),
    });
    return {
      status: answer.statusCode,
      headers: answer.headers,
      // biome-ignore lint/suspicious/noExplicitAny: the answers are checked field by field
      body: (await answer.body.json()) as Record<string, any>,
    };
  }
  async function decodeWorkerOf(): Promise<string | null> {
    const { response } = await client.completions
      .create({ model: 'fake-model', prompt: 'hello', max_tokens: 2 })
      .withResponse();
    return response.headers.get('x-disagg-decode-worker');
  }
  async function metric(line: string): Promise<string | undefined> {
    const text = await (await request(`${url}/metrics`)).body.text();
    return text.split('\n').find((candidate) => candidate.startsWith(line));
  }
  return { proxy, url, client, admin, decodeWorkerOf, metric, prefill, decode, logs: logger.records };
}

/** Two decode workers on one port at two loopback addresses, as two pods behind one Service. */
async function decodePair(protocol: 'vllm' | 'sglang', hosts: [string, string]) {
  const first = await fakes.start({ role: 'decode', protocol, tokens: 2, host: hosts[0] });
  const second = await fakes.start({ role: 'decode', protocol, tokens: 2, host: hosts[1], port: first.port });
  return [first, second] as const;
}

/** Requests one after another until `stop()`: how many, and how many failed or came back wrong. */
function keepRequesting(client: OpenAI) {
  let stopped = false;
  let requests = 0;
  let failures = 0;
  const running = (async () => {
    while (!stopped) {
      requests += 1;
      try {
        const { choices } = await client.completions.create({ model: 'fake-model', prompt: 'hello', max_tokens: 2 });
        if (choices[0]?.text !== 'tok0 tok1 ') failures += 1;
      } catch {
        failures += 1;
      }
    }
  })();
  return {
    async stop() {
      stopped = true;
      await running;
      return { requests, failures };
    },
  };
}

/** The generation requests a worker received. */
const served = (worker: { requests: Array<{ path: string }> }) =>
  worker.requests.filter((r) => r.path === '/v1/completions').length;

describe('the admin API', () => {
  it('is off without an admin key (a 404 like any unknown path), and refuses a wrong key with a 401', async () => {
    const off = await start({});
    expect((await off.admin('GET', '/admin/workers')).status).toBe(404);
    const on = await start();
    const wrong = await on.admin('GET', '/admin/workers', undefined, { authorization: 'Bearer nope' });
    expect(wrong.status).toBe(401);
    expect(wrong.body.error).toMatchObject({ code: 'invalid_api_key', message: expect.stringContaining('admin key') });
    expect((await on.admin('GET', '/admin/workers', undefined, {} as typeof ADMIN)).status).toBe(401);
  });

  it('lists both pools: name, URL, state, requests in flight and who put each worker there', async () => {
    const { admin, prefill, decode } = await start();
    const list = await admin('GET', '/admin/workers');
    expect(list.status).toBe(200);
    expect(list.body).toEqual({
      prefill: [
        { role: 'prefill', name: 'prefill-0', url: prefill.url, state: 'ready', in_flight: 0, source: 'config' },
      ],
      decode: [{ role: 'decode', name: 'decode-0', url: decode.url, state: 'ready', in_flight: 0, source: 'config' }],
    });
  });

  it('admin calls are not traffic: neither counted in disagg_requests_total nor timed, whatever they answer', async () => {
    const { admin, client, metric, url } = await start();
    expect((await admin('GET', '/admin/workers')).status).toBe(200);
    expect((await admin('GET', '/admin/workers/nobody')).status).toBe(404);
    expect((await admin('GET', '/admin/workers', undefined, { authorization: 'Bearer nope' })).status).toBe(401);
    await client.completions.create({ model: 'fake-model', prompt: 'hello', max_tokens: 2 });
    // The traffic's own answer is counted once its response closes: then every admin one was too.
    await eventuallyAsync(
      async () => (await metric('disagg_requests_total{route="completions",status="200"')) !== undefined,
      'the completion counted',
    );
    const text = await (await request(`${url}/metrics`)).body.text();
    expect(text).not.toContain('route="admin"');
  });
  it('a worker added down says why, in the answer, the list and the log: what its probe got and the usual cause', async () => {
    const { admin, decode, logs } = await start();
    const refused = await admin('POST', '/admin/workers', { role: 'decode', url: 'http://127.0.0.1:1' });
    expect(refused.status).toBe(201);
    expect(refused.body).toMatchObject({
      state: 'down',
      reason: 'ECONNREFUSED',
      hint: 'nothing listens there: is the worker up, and the port right?',
    });
    const wrongPath = await admin('POST', '/admin/workers', { role: 'decode', url: `${decode.url}/api` });
    expect(wrongPath.body).toMatchObject({
      state: 'down',
      reason: 'GET /health answered 404',
      hint: expect.stringContaining('has no /health'),
    });
    const listed = (await admin('GET', '/admin/workers')).body as { decode: Array<{ name: string; reason?: string }> };
    expect(listed.decode.map(({ name, reason }) => ({ name, reason }))).toEqual([
      { name: 'decode-0', reason: undefined },
      { name: 'decode-1', reason: 'ECONNREFUSED' },
      { name: 'decode-2', reason: 'GET /health answered 404' },
    ]);
    expect(logs.find((record) => (record.fields as { worker?: string }).worker === 'decode-1')?.fields).toMatchObject({
      state: 'down',
      reason: 'ECONNREFUSED',
    });
  });

  it('a worker added takes requests at once, without a restart; the change is logged and counted', async () => {
    const { admin, decodeWorkerOf, metric, logs } = await start();
    const second = await fakes.start({ role: 'decode', protocol: 'vllm', tokens: 2 });
    const added = await admin('POST', '/admin/workers', { role: 'decode', url: second.url });
    expect(added.status).toBe(201);
    expect(added.body).toMatchObject({
      role: 'decode',
      name: 'decode-1',
      url: second.url,
      state: 'ready',
      source: 'admin',
    });
    const served = [await decodeWorkerOf(), await decodeWorkerOf(), await decodeWorkerOf(), await decodeWorkerOf()];
    expect(new Set(served)).toEqual(new Set(['decode-0', 'decode-1']));
    expect(second.requests.filter((r) => r.path === '/v1/completions').length).toBe(2);
    expect(await metric('disagg_worker_changes_total{role="decode",change="added",source="admin"}')).toMatch(/ 1$/);
    expect(await metric('disagg_workers{role="decode",state="ready"}')).toMatch(/ 2$/);
    expect(logs.find((log) => log.message === 'Worker added to the decode pool')?.fields).toMatchObject({
      worker: 'decode-1',
      source: 'admin',
    });
  });

  it('a worker that does not answer its probe is added out of rotation and takes no request', async () => {
    const { admin, decodeWorkerOf } = await start();
    const down = await fakes.start({ role: 'decode', protocol: 'vllm', tokens: 2 });
    down.setHealthy(false);
    const added = await admin('POST', '/admin/workers', { role: 'decode', url: down.url, name: 'decode-spare' });
    expect(added.body).toMatchObject({ name: 'decode-spare', state: 'down' });
    expect([await decodeWorkerOf(), await decodeWorkerOf()]).toEqual(['decode-0', 'decode-0']);
  });

  it('refuses a bad worker with a 400 before touching the pools, and one already there with a 409', async () => {
    const { admin, decode } = await start();
    const cases: Array<[unknown, number, string]> = [
      ['{', 400, 'The body is not JSON'],
      [[1], 400, 'must be an object with role and url'],
      ['null', 400, 'must be an object with role and url'],
      ['3', 400, 'must be an object with role and url'],
      [{ url: 'http://x:1' }, 400, "role must be 'prefill' or 'decode'"],
      [{ role: 'decode', url: 'x:1' }, 400, 'not an http(s) URL'],
      [{ role: 'decode', url: 'http://x:1', nmae: 'a' }, 400, 'unknown worker field "nmae"'],
      [{ role: 'decode', url: decode.url }, 409, 'already in the pool, as decode-0'],
      [{ role: 'decode', url: 'http://127.0.0.1:1', name: 'prefill-0' }, 409, 'The name "prefill-0" is taken'],
    ];
    for (const [body, status, message] of cases) {
      const answer = await admin('POST', '/admin/workers', body);
      expect(answer.status, JSON.stringify(body)).toBe(status);
      expect(answer.body.error.message).toContain(message);
    }
    expect((await admin('GET', '/admin/workers')).body.decode).toHaveLength(1);
    expect((await admin('DELETE', '/admin/workers/decode-9')).status).toBe(404);
    const idle = await fakes.start({ role: 'decode', protocol: 'vllm', tokens: 2 });
    await admin('POST', '/admin/workers', { role: 'decode', url: idle.url, name: 'idle' });
    // Nothing under way on it: it has left by the time the answer is written.
    expect((await admin('POST', '/admin/workers/idle/drain')).body).toMatchObject({ state: 'left', in_flight: 0 });
    const wrongMethod = await admin('GET', '/admin/workers/decode-0/drain');
    expect(wrongMethod.status).toBe(405);
    expect(wrongMethod.headers.allow).toBe('POST, DELETE');
  });

  it('routes: each path takes its methods (405 with Allow otherwise); an unknown worker is a 404 naming it', async () => {
    const { admin, url } = await start();
    const listing = await admin('DELETE', '/admin/workers');
    expect([listing.status, listing.headers.allow]).toEqual([405, 'GET, HEAD, POST']);
    expect(listing.body.error.message).toBe('DELETE is not allowed on /admin/workers: use GET or HEAD or POST');
    const head = await request(`${url}/admin/workers`, { method: 'HEAD', headers: ADMIN });
    expect(head.statusCode).toBe(200);
    await head.body.dump();
    const worker = await admin('POST', '/admin/workers/decode-0');
    expect([worker.status, worker.headers.allow]).toEqual([405, 'GET, HEAD, DELETE']);
    expect(worker.body.error.message).toBe('POST is not allowed on /admin/workers/decode-0: use GET or HEAD or DELETE');
    // One worker, as the list shows it (once a 405).
    expect(await admin('GET', '/admin/workers/decode-0')).toMatchObject({
      status: 200,
      body: { role: 'decode', name: 'decode-0', state: 'ready', source: 'config' },
    });
    // Undrain of a worker in rotation answers it as it is.
    const leaving = await admin('POST', '/admin/workers/decode-0/undrain');
    expect(leaving.status).toBe(200);
    expect(leaving.body).toMatchObject({ state: 'ready' });
    const nameless = await admin('DELETE', '/admin/workers/');
    expect([nameless.status, nameless.body.error.message]).toEqual([404, 'No route DELETE /admin/workers/']);
    // A drain without a name is no route either, not a worker named "".
    const namelessDrain = await admin('POST', '/admin/workers//drain');
    expect([namelessDrain.status, namelessDrain.body.error.message]).toEqual([
      404,
      'No route POST /admin/workers//drain',
    ]);
    const garbled = await admin('DELETE', '/admin/workers/%ZZ');
    expect([garbled.status, garbled.body.error.message]).toEqual([
      400,
      'The path holds "%ZZ", which is not valid percent-encoding',
    ]);
    const unknown = await admin('POST', '/admin/workers/decode%2D9/drain');
    expect([unknown.status, unknown.body.error.message]).toEqual([404, 'No worker is named "decode-9"']);
    expect((await admin('GET', '/admin/workers')).body.decode).toHaveLength(1);
  });

  it('draining: the request under way finishes whole, new ones go elsewhere, then the worker leaves', async () => {
    const { admin, client, decodeWorkerOf, metric, logs } = await start({ adminKey: 'admin-secret' }, 2);
    const slow = await fakes.start({ role: 'decode', protocol: 'vllm', tokens: 40, tokenIntervalMs: 25 });
    await admin('POST', '/admin/workers', { role: 'decode', url: slow.url, name: 'slow' });
    await decodeWorkerOf(); // decode-0; the next goes to slow
    const { data: stream, response } = await client.completions
      .create({ model: 'fake-model', prompt: 'hello', max_tokens: 40, stream: true })
      .withResponse();
    expect(response.headers.get('x-disagg-decode-worker')).toBe('slow');
    const chunks: string[] = [];
    const reading = (async () => {
      for await (const chunk of stream) chunks.push(chunk.choices[0]?.text ?? '');
    })();
    const drained = await admin('POST', '/admin/workers/slow/drain');
    expect(drained.status).toBe(202);
    expect(drained.body).toMatchObject({ name: 'slow', state: 'draining', in_flight: 1 });
    expect([await decodeWorkerOf(), await decodeWorkerOf()]).toEqual(['decode-0', 'decode-0']);
    await reading;
    expect(chunks.join('')).toBe(Array.from({ length: 40 }, (_, i) => `tok${i} `).join(''));
    await eventuallyAsync(
      async () => (await admin('GET', '/admin/workers')).body.decode.length === 1,
      'the drained worker leaves',
    );
    expect(logs.map((log) => log.message)).toContain('Drained worker left the pool');
    expect(await metric('disagg_worker_changes_total{role="decode",change="left",source="admin"}')).toMatch(/ 1$/);
  });

  it('removing: out of the pool at once (by name or URL); removing the last decode worker makes /ready fail', async () => {
    const { admin, url, decode, decodeWorkerOf, metric } = await start();
    const second = await fakes.start({ role: 'decode', protocol: 'vllm', tokens: 2 });
    await admin('POST', '/admin/workers', { role: 'decode', url: second.url });
    const removed = await admin('DELETE', `/admin/workers/${encodeURIComponent(decode.url)}`);
    expect(removed).toMatchObject({ status: 200, body: { name: 'decode-0', url: decode.url, state: 'left' } });
    expect(await metric('disagg_worker_changes_total{role="decode",change="removed"')).toBe(
      'disagg_worker_changes_total{role="decode",change="removed",source="admin"} 1',
    );
    expect([await decodeWorkerOf(), await decodeWorkerOf()]).toEqual(['decode-1', 'decode-1']);
    expect((await request(`${url}/ready`)).statusCode).toBe(200);
    await admin('DELETE', '/admin/workers/decode-1');
    const ready = await request(`${url}/ready`);
    expect(ready.statusCode).toBe(503);
    expect(await ready.body.json()).toMatchObject({ reason: 'no decode worker in rotation', decode_workers: 0 });
    const refused = await request(`${url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'fake-model', prompt: 'hi', max_tokens: 2 }),
    });
    expect(refused.statusCode).toBe(503);
    expect(await refused.body.text()).not.toContain('127.0.0.1');
    // And back: a worker added again serves.
    expect((await admin('POST', '/admin/workers', { role: 'decode', url: decode.url })).body).toMatchObject({
      name: 'decode-2',
      state: 'ready',
    });
    expect(await decodeWorkerOf()).toBe('decode-2');
  });

  it("an added SGLang prefill worker gets the proxy's bootstrap port unless it names one", async () => {
    const logger = recordingLogger();
    const decode = await fakes.start({ role: 'decode', protocol: 'sglang', tokens: 2 });
    const prefill = await fakes.start({ role: 'prefill', protocol: 'sglang' });
    const proxy = createProxy({
      connector: 'sglang',
      prefill: [],
      decode: [{ url: decode.url }],
      bootstrapPort: prefill.bootstrapPort,
      adminKey: 'admin-secret',
      discovery: { prefillDns: 'http://prefill-headless.invalid:8100', dnsIntervalMs: 60_000 },
      logger: logger.logger,
    });
    proxies.push(proxy);
    const url = await proxy.listen(0);
    const added = await request(`${url}/admin/workers`, {
      method: 'POST',
      headers: ADMIN,
      body: JSON.stringify({ role: 'prefill', url: prefill.url }),
    });
    expect(await added.body.json()).toMatchObject({ name: 'prefill-0', bootstrap_port: prefill.bootstrapPort });
    const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'x', maxRetries: 0 });
    const { response } = await client.completions
      .create({ model: 'fake-model', prompt: 'hello', max_tokens: 2 })
      .withResponse();
    expect(response.headers.get('x-disagg-prefill-worker')).toBe('prefill-0');
    expect(prefill.requests.filter((r) => r.path === '/v1/completions')).toHaveLength(1);
  });
});

describe('DNS discovery', () => {
  it('a name whose addresses change changes the pool without a restart and without failing a request', async () => {
    const [first, second] = await decodePair('vllm', ['127.0.0.2', '127.0.0.3']);
    const prefill = await fakes.start({ role: 'prefill', protocol: 'vllm' });
    const answer = { addresses: ['127.0.0.2'] };
    const asked = new Set<string>();
    const logger = recordingLogger();
    const proxy = createProxy({
      connector: 'vllm',
      prefill: [{ url: prefill.url }],
      decode: [],
      selection: 'round-robin',
      discovery: { decodeDns: `http://decode-headless.llm.svc:${first.port}`, dnsIntervalMs: 10 },
      dnsLookup: async (hostname) => {
        asked.add(hostname);
        return answer.addresses.map((address) => ({ address }));
      },
      adminKey: 'admin-secret',
      logger: logger.logger,
    });
    proxies.push(proxy);
    const url = await proxy.listen(0);
    const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'x', maxRetries: 0 });
    // Requests all along, while the addresses change under them.
    const load = keepRequesting(client);
    const pool = () => proxy.decodeWorkers.workers.map((worker) => worker.url);
    const count = served;
    expect(pool()).toEqual([first.url]);
    await eventuallyAsync(async () => count(first) > 2, 'requests reach the first address');
    answer.addresses = ['127.0.0.2', '127.0.0.3'];
    await eventuallyAsync(async () => count(second) > 2, 'requests reach the address that appeared');
    answer.addresses = ['127.0.0.3'];
    await eventuallyAsync(async () => pool().length === 1 && pool()[0] === second.url, 'the vanished address leaves');
    const before = count(first);
    const after = count(second);
    await eventuallyAsync(async () => count(second) > after + 2, 'requests go on');
    const { requests, failures } = await load.stop();
    expect(count(first)).toBe(before);
    expect(failures).toBe(0);
    expect(requests).toBeGreaterThan(6);
    expect([...asked]).toEqual(['decode-headless.llm.svc']);
    const metrics = await (await request(`${url}/metrics`)).body.text();
    expect(metrics).toContain('disagg_worker_changes_total{role="decode",change="added",source="dns"} 2');
    expect(metrics).toContain('disagg_worker_changes_total{role="decode",change="left",source="dns"} 1');
    expect(logger.records.map((record) => record.message)).toContain('DNS discovery changed the pool');
  });

  it('before the name has an address /ready says no decode worker; once it has, ready', async () => {
    const decode = await fakes.start({ role: 'decode', protocol: 'vllm', tokens: 2, host: '127.0.0.4' });
    const prefill = await fakes.start({ role: 'prefill', protocol: 'vllm' });
    const answer = { addresses: [] as string[] };
    const proxy = createProxy({
      connector: 'vllm',
      prefill: [{ url: prefill.url }],
      decode: [],
      discovery: { decodeDns: `http://decode-headless:${decode.port}`, dnsIntervalMs: 10 },
      dnsLookup: async () => answer.addresses.map((address) => ({ address })),
      logger: recordingLogger().logger,
    });
    proxies.push(proxy);
    const url = await proxy.listen(0);
    expect((await request(`${url}/ready`)).statusCode).toBe(503);
    answer.addresses = ['127.0.0.4'];
    await eventuallyAsync(async () => (await request(`${url}/ready`)).statusCode === 200, 'ready once found');
  });
});

describe('Kubernetes discovery', () => {
  it('pods appearing and disappearing on the API change the rotation without a restart and without failing a request', async () => {
    const api = await startKubernetesApi();
    const [first, second] = await decodePair('sglang', ['127.0.0.5', '127.0.0.6']);
    const prefill = await fakes.start({ role: 'prefill', protocol: 'sglang', host: '127.0.0.7', port: first.port });
    const pod = (name: string, ip: string, role: string, extra: Partial<StandInPod> = {}): StandInPod => ({
      name,
      namespace: 'llm',
      labels: { app: 'sglang', role },
      ip,
      ...extra,
    });
    api.apply(
      pod('prefill-a', '127.0.0.7', 'prefill', {
        annotations: { 'sglang.ai/bootstrap-port': String(prefill.bootstrapPort) },
      }),
    );
    api.apply(pod('decode-a', '127.0.0.5', 'decode'));
    const logger = recordingLogger();
    const proxy = createProxy({
      connector: 'sglang',
      prefill: [],
      decode: [],
      selection: 'round-robin',
      discovery: {
        prefillSelector: 'app=sglang,role=prefill',
        decodeSelector: 'app=sglang,role=decode',
        namespace: 'llm',
        port: first.port,
      },
      kubeConfig: kubeConfigFor(api.url),
      logger: logger.logger,
    });
    proxies.push(proxy);
    const url = await proxy.listen(0);
    const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'x', maxRetries: 0 });
    expect(proxy.prefillWorkers.workers).toMatchObject([{ url: prefill.url, bootstrapPort: prefill.bootstrapPort }]);
    const load = keepRequesting(client);
    const count = served;
    await eventuallyAsync(async () => count(first) > 2, 'the first pod serves');
    api.apply(pod('decode-b', '127.0.0.6', 'decode'));
    await eventuallyAsync(async () => count(second) > 2, 'a pod that appeared serves');
    api.apply(pod('decode-a', '127.0.0.5', 'decode', { terminating: true }));
    await eventuallyAsync(
      async () => proxy.decodeWorkers.workers.length === 1,
      'a terminating pod leaves the rotation',
    );
    const before = count(first);
    const after = count(second);
    api.remove('decode-a', 'llm');
    await eventuallyAsync(async () => count(second) > after + 2, 'requests go on');
    const { failures } = await load.stop();
    await api.close();
    expect(count(first)).toBe(before);
    expect(failures).toBe(0);
    const metrics = await (await request(`${url}/metrics`)).body.text();
    expect(metrics).toContain('disagg_worker_changes_total{role="decode",change="added",source="kubernetes"} 2');
    expect(metrics).toContain('disagg_worker_changes_total{role="decode",change="draining",source="kubernetes"} 1');
    expect(logger.records.map((record) => record.message)).toContain('Kubernetes discovery changed the pool');
  });

  it("only the namespace's pods are workers, each role on its own port (prefillPort, decodePort before port)", async () => {
    const api = await startKubernetesApi();
    const prefill = await fakes.start({ role: 'prefill', protocol: 'vllm', host: '127.0.0.8' });
    const decode = await fakes.start({ role: 'decode', protocol: 'vllm', tokens: 2, host: '127.0.0.9' });
    const stray = await fakes.start({
      role: 'decode',
      protocol: 'vllm',
      tokens: 2,
      host: '127.0.0.10',
      port: decode.port,
    });
    const pod = (name: string, namespace: string, ip: string, role: string): StandInPod => ({
      name,
      namespace,
      labels: { app: 'vllm', role },
      ip,
    });
    api.apply(pod('prefill-a', 'llm', '127.0.0.8', 'prefill'));
    api.apply(pod('decode-a', 'llm', '127.0.0.9', 'decode'));
    // Same labels, another team's namespace.
    api.apply(pod('decode-b', 'other', '127.0.0.10', 'decode'));
    const proxy = createProxy({
      connector: 'vllm',
      prefill: [],
      decode: [],
      discovery: {
        prefillSelector: 'app=vllm,role=prefill',
        decodeSelector: 'app=vllm,role=decode',
        namespace: 'llm',
        port: 1,
        prefillPort: prefill.port,
        decodePort: decode.port,
      },
      kubeConfig: kubeConfigFor(api.url),
      logger: recordingLogger().logger,
    });
    proxies.push(proxy);
    const url = await proxy.listen(0);
    expect(proxy.prefillWorkers.workers.map((worker) => worker.url)).toEqual([prefill.url]);
    expect(proxy.decodeWorkers.workers.map((worker) => worker.url)).toEqual([decode.url]);
    const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'x', maxRetries: 0 });
    await client.completions.create({ model: 'm', prompt: 'x', max_tokens: 2 });
    expect([prefill.requests.length, decode.requests.length, stray.requests.length]).toEqual([1, 1, 0]);
    await api.close();
  });

  it("a pod's labels reach its worker's attributes, where routing reads them", async () => {
    const api = await startKubernetesApi();
    const prefill = await fakes.start({ role: 'prefill', protocol: 'vllm' });
    const decode = await fakes.start({ role: 'decode', protocol: 'vllm', tokens: 2, host: '127.0.0.44' });
    api.apply({
      name: 'decode-v2',
      namespace: 'llm',
      labels: { app: 'vllm', role: 'decode', 'disagg.ai/revision': 'v2' },
      ip: '127.0.0.44',
    });
    const proxy = createProxy({
      connector: 'vllm',
      prefill: [{ url: prefill.url }],
      decode: [],
      discovery: { decodeSelector: 'app=vllm,role=decode', namespace: 'llm', port: decode.port },
      kubeConfig: kubeConfigFor(api.url),
      logger: recordingLogger().logger,
    });
    proxies.push(proxy);
    await proxy.listen(0);
    expect(proxy.decodeWorkers.workers).toMatchObject([
      { url: decode.url, name: 'decode-v2', attributes: { app: 'vllm', role: 'decode', 'disagg.ai/revision': 'v2' } },
    ]);
    await api.close();
  });

  it('an admin drain of a discovered worker holds it out of rotation, listed as drained, until undrained; discovery neither re-adds nor renames it; a pod gone ends the hold', async () => {
    const api = await startKubernetesApi();
    const [first, second] = await decodePair('vllm', ['127.0.0.41', '127.0.0.42']);
    await fakes.start({ role: 'prefill', protocol: 'vllm', host: '127.0.0.43', port: first.port });
    const pod = (name: string, ip: string, role: string): StandInPod => ({
      name,
      namespace: 'llm',
      labels: { app: 'vllm', role },
      ip,
    });
    api.apply(pod('prefill-a', '127.0.0.43', 'prefill'));
    api.apply(pod('decode-a', '127.0.0.41', 'decode'));
    api.apply(pod('decode-b', '127.0.0.42', 'decode'));
    const proxy = createProxy({
      connector: 'vllm',
      prefill: [],
      decode: [],
      selection: 'round-robin',
      adminKey: 'admin-secret',
      discovery: {
        prefillSelector: 'app=vllm,role=prefill',
        decodeSelector: 'app=vllm,role=decode',
        namespace: 'llm',
        port: first.port,
      },
      kubeConfig: kubeConfigFor(api.url),
      logger: recordingLogger().logger,
    });
    proxies.push(proxy);
    const url = await proxy.listen(0);
    const admin = async (method: 'GET' | 'POST' | 'DELETE', path: string) => {
      const answer = await request(`${url}${path}`, { method, headers: ADMIN });
      // biome-ignore lint/suspicious/noExplicitAny: the answers are checked field by field
      return { status: answer.statusCode, body: (await answer.body.json()) as Record<string, any> };
    };
    const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'x', maxRetries: 0 });
    const decodeOf = async () =>
      (
        await client.completions.create({ model: 'fake-model', prompt: 'hi', max_tokens: 2 }).withResponse()
      ).response.headers.get('x-disagg-decode-worker');
    await eventuallyAsync(async () => proxy.decodeWorkers.available.length === 2, 'both pods found');

    const drained = await admin('POST', '/admin/workers/decode-a/drain');
    expect(drained.status).toBe(202);
    expect(drained.body).toMatchObject({ name: 'decode-a', source: 'kubernetes', state: 'drained' });
    const one = await admin('GET', '/admin/workers/decode-a');
    expect(one.status).toBe(200);
    expect(one.body).toMatchObject({ name: 'decode-a', state: 'drained', reason: 'drained through the admin API' });
    expect(one.body.hint).toContain('POST /admin/workers/decode-a/undrain');
    // Its pod changes (still Ready): discovery runs again and leaves it out, under its own name.
    api.apply({ ...pod('decode-a', '127.0.0.41', 'decode'), annotations: { touched: 'yes' } });
    api.apply(pod('decode-c', '127.0.0.44', 'decode'));
    await eventuallyAsync(async () => proxy.decodeWorkers.workers.length === 3, 'discovery ran again');
    const listed = (await admin('GET', '/admin/workers')).body.decode as Array<{ name: string; state: string }>;
    expect(listed.filter((worker) => worker.name.startsWith('decode-a'))).toMatchObject([
      { name: 'decode-a', state: 'drained' },
    ]);
    api.remove('decode-c', 'llm');
    await eventuallyAsync(async () => proxy.decodeWorkers.workers.length === 2, 'the extra pod gone');
    const before = served(first);
    for (let i = 0; i < 4; i++) expect(await decodeOf()).toBe('decode-b');
    expect(served(first)).toBe(before);

    const back = await admin('POST', '/admin/workers/decode-a/undrain');
    expect(back.status).toBe(200);
    expect(back.body).toMatchObject({ name: 'decode-a', state: 'ready' });
    const names = new Set([await decodeOf(), await decodeOf(), await decodeOf()]);
    expect(names).toEqual(new Set(['decode-a', 'decode-b']));

    // Drained again (DELETE .../drain undrains too), then its pod goes: the hold ends with it.
    expect((await admin('POST', '/admin/workers/decode-a/drain')).status).toBe(202);
    expect((await admin('DELETE', '/admin/workers/decode-a/drain')).body).toMatchObject({ state: 'ready' });
    expect((await admin('POST', '/admin/workers/decode-a/drain')).status).toBe(202);
    api.remove('decode-a', 'llm');
    await eventuallyAsync(
      async () => (await admin('GET', '/admin/workers/decode-a')).status === 404,
      'gone with its pod',
    );
    await api.close();
    expect(second.requests.length).toBeGreaterThan(0);
  });
});
