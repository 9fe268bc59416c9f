import { spawnSync } from 'node:child_process';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { describe, expect, it } from 'vitest';

const root = fileURLToPath(new URL('../..', import.meta.url));
const dist = (entry: string) => pathToFileURL(`${root}/dist/${entry}.js`).href;

/**
 * Runs `first`, then loads the built package and sends one request through `httpEngine` to
 * fake workers, in a Node process of its own (the one running the suite: Node 20 under `npm
 * test`, Node 24 in CI's second run). Prints what the client read.
 */
function routeAfter(
  first: string,
  protocol: 'vllm' | 'sglang',
): { stdout: string; stderr: string; status: number | null } {
  const script = `
${first}
const { disaggregate, httpEngine, sglangBootstrap, vllmNixl, WorkerPool, Controller, Annotated } = await import(${JSON.stringify(dist('index'))});
const { startFakeWorker } = await import(${JSON.stringify(dist('testing'))});
const protocol = ${JSON.stringify(protocol)};
const prefill = await startFakeWorker({ role: 'prefill', protocol });
const decode = await startFakeWorker({ role: 'decode', protocol, tokens: 3 });
const engine = httpEngine();
try {
  const stream = await disaggregate({
    request: { model: 'm', prompt: 'hi', max_tokens: 3, stream: true },
    context: new Controller(),
    connector: protocol === 'vllm' ? vllmNixl : sglangBootstrap,
    prefill: engine,
    decode: engine,
    prefillWorkers: new WorkerPool([{ url: prefill.url, bootstrapPort: prefill.bootstrapPort }]),
    decodeWorkers: new WorkerPool([{ url: decode.url }]),
  });
  let text = '';
  for await (const item of stream) text += Annotated.err(item)?.message ?? item.data?.text ?? '';
  console.log(text + '|' + JSON.stringify(prefill.ledger.outstanding()));
} finally {
  await Promise.all([prefill.close(), decode.close()]);
}
`;
  const run = spawnSync(process.execPath, ['--input-type=module', '-e', script], { cwd: root, encoding: 'utf8' });
  return { stdout: run.stdout, stderr: run.stderr, status: run.status };
}

// Node 20 and 22 bundle an older undici that takes undici's process-wide dispatcher slot the
// first time anything touches a WHATWG global; calls through that dispatcher failed with
// "invalid onError method". The library's calls go through a pool of its own instead.
describe('whatever the host imported first, httpEngine reaches its workers', () => {
  it.each([
    ['the WHATWG Response global', 'void globalThis.Response;'],
    ['fetch and Headers', 'void globalThis.fetch; new Headers({ a: "b" });'],
    ["Hono's Node server", "await import('@hono/node-server');"],
    ['a fetch call made first', "await fetch('http://127.0.0.1:1/').catch(() => {});"],
  ])('after %s: the tokens arrive and no KV is left held (vLLM)', (_name, first) => {
    const run = routeAfter(first, 'vllm');
    expect(run.stderr).toBe('');
    expect(run.stdout).toBe('tok0 tok1 tok2 |[]\n');
    expect(run.status).toBe(0);
  });

  it('after the WHATWG globals, the SGLang rendezvous too', () => {
    const run = routeAfter('void globalThis.Response; void globalThis.fetch;', 'sglang');
    expect(run.stderr).toBe('');
    expect(run.stdout).toBe('tok0 tok1 tok2 |[]\n');
  });

  it('an idle pool does not keep the process alive: the script above ends on its own', () => {
    // spawnSync returned, with status 0: nothing of the library's pool held the event loop.
    expect(routeAfter('', 'vllm').status).toBe(0);
  });
});
