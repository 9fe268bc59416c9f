// The routers of examples/ (docs/library.md's "Build your own router"), each in a process of its
// own against the built package, driven by the official openai client through fake workers.
import { type ChildProcessWithoutNullStreams, spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import OpenAI from 'openai';
import { afterEach, describe, expect, it } from 'vitest';
import { type FakeWorker, startFakeWorker } from '../src/testing/index.js';

const root = fileURLToPath(new URL('..', import.meta.url));
const cleanups: Array<() => unknown> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

async function fake(options: Parameters<typeof startFakeWorker>[0]): Promise<FakeWorker> {
  const worker = await startFakeWorker(options);
  cleanups.push(() => worker.close());
  return worker;
}

/** The example `name` in a process of its own, on a free port, in front of the workers of `env`. */
async function router(name: string, env: Record<string, string>) {
  const child: ChildProcessWithoutNullStreams = spawn(process.execPath, ['--import', 'tsx', `examples/${name}.ts`], {
    cwd: root,
    env: { ...process.env, PORT: '0', ...env },
  });
  let stdout = '';
  let stderr = '';
  child.stderr.on('data', (chunk) => {
    stderr += chunk;
  });
  const url = await new Promise<string>((resolve, reject) => {
    child.stdout.on('data', (chunk: Buffer) => {
      stdout += chunk;
      const found = /listening on (\S+)/.exec(stdout);
      if (found?.[1] !== undefined) resolve(found[1]);
    });
    child.once('exit', (code) => reject(new Error(`the router exited (${code}): ${stderr}`)));
  });
  cleanups.push(
    () =>
      new Promise<void>((resolve) => {
        child.once('exit', () => resolve());
        child.kill('SIGTERM');
      }),
  );
  const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'unused', maxRetries: 0 });
  return { url, client, stdout: () => stdout, stderr: () => stderr };
}

/** The router's log lines (pino's JSON on stderr) as `level: message`, each line JSON or failing. */
function logged(stderr: string): string[] {
  const levels: Record<number, string> = { 20: 'debug', 30: 'info', 40: 'warn', 50: 'error', 60: 'fatal' };
  return stderr
    .split('\n')
    .filter((line) => line !== '')
    .map((line) => {
      const { level, msg } = JSON.parse(line) as { level: number; msg: string };
      return `${levels[level] ?? level}: ${msg}`;
    });
}

/** What a streamed answer said, and how it finished. */
async function read(stream: AsyncIterable<OpenAI.Completions.Completion | OpenAI.Chat.ChatCompletionChunk>) {
  let text = '';
  let finish: string | null | undefined;
  for await (const chunk of stream) {
    const choice = chunk.choices[0] as {
      text?: string;
      delta?: { content?: string | null };
      finish_reason?: string | null;
    };
    text += choice?.text ?? choice?.delta?.content ?? '';
    finish = choice?.finish_reason ?? finish;
  }
  return { text, finish };
}

describe.each(['router-hono', 'router-express'])('examples/%s.ts: a router from the library guide alone', (name) => {
  it.each(['vllm', 'sglang'] as const)(
    '%s: streamed and whole answers; a decode worker that dies costs no client an error; bad requests and failures answered cleanly; no KV held',
    async (protocol) => {
      const prefill = await fake({ role: 'prefill', protocol });
      const decode = [
        await fake({ role: 'decode', protocol, tokens: 3 }),
        await fake({ role: 'decode', protocol, tokens: 3 }),
      ];
      const running = await router(name, {
        CONNECTOR: protocol,
        PREFILL: prefill.url,
        DECODE: decode.map((worker) => worker.url).join(','),
        BOOTSTRAP_PORT: String(prefill.bootstrapPort),
      });
      const { client } = running;
      const chat = () =>
        client.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'Say hi' }], stream: true });
      const completion = () => client.completions.create({ model: 'm', prompt: 'Say', max_tokens: 2 });
      expect(await read(await chat())).toEqual({ text: 'tok0 tok1 tok2 ', finish: 'stop' });
      expect((await completion()).choices[0]?.text).toBe('tok0 tok1 ');

      // A decode worker dies between two rounds of health probes: every request still succeeds.
      await decode[0]?.close();
      for (let i = 0; i < 3; i++) {
        expect(await read(await chat())).toEqual({ text: 'tok0 tok1 tok2 ', finish: 'stop' });
        expect((await completion()).choices[0]?.text).toBe('tok0 tok1 ');
      }

      const before = [prefill.requests.length, decode[1]?.requests.length];
      const bad = await client.completions
        .create({ model: 'm', prompt: 'Say', max_tokens: 'ten' as never })
        .catch((error: unknown) => error);
      expect(bad).toBeInstanceOf(OpenAI.BadRequestError);
      expect(bad).toMatchObject({ param: 'max_tokens' });
      expect([prefill.requests.length, decode[1]?.requests.length]).toEqual(before);

      prefill.setFault({ type: 'status', status: 500, message: `broken at ${prefill.url}` });
      const failed = await completion().catch((error: unknown) => error);
      expect(failed).toMatchObject({ status: 502 });
      expect(String((failed as Error).message)).not.toContain('127.0.0.1');
      expect(((failed as InstanceType<typeof OpenAI.APIError>).error as { leg?: string }).leg).toBe('prefill');

      expect(prefill.ledger.outstanding()).toEqual([]);
      // Every answer metered, streamed ones included (asked of the workers, not shown to clients).
      expect(running.stdout()).toMatch(/chat: 1\d tokens/);
      // What an operator reads: the dead worker taken out, once; no error, no stack.
      expect(logged(running.stderr())).toEqual(['warn: Worker unreachable; out of rotation until it answers a probe']);
    },
    30_000,
  );
});

describe('examples/router.ts: the same on node:http', () => {
  it.each(['vllm', 'sglang'] as const)(
    '%s: streamed chat and a whole completion; a bad request is a 400 before any worker; failures name no address',
    async (protocol) => {
      const prefill = await fake({ role: 'prefill', protocol });
      const decode = await fake({ role: 'decode', protocol, tokens: 3 });
      const { client, stderr } = await router('router', {
        CONNECTOR: protocol,
        PREFILL: prefill.url,
        DECODE: decode.url,
        BOOTSTRAP_PORT: String(prefill.bootstrapPort),
      });
      const chat = await client.chat.completions.create({
        model: 'm',
        messages: [{ role: 'user', content: 'Say hi' }],
        stream: true,
      });
      expect(await read(chat)).toEqual({ text: 'tok0 tok1 tok2 ', finish: 'stop' });
      const completion = await client.completions.create({ model: 'm', prompt: 'Say', max_tokens: 2 });
      expect(completion.choices[0]?.text).toBe('tok0 tok1 ');
      const before = [prefill.requests.length, decode.requests.length];
      const bad = await client.completions
        .create({ model: 'm', prompt: 'Say', max_tokens: 'ten' as never })
        .catch((error: unknown) => error);
      expect(bad).toMatchObject({ status: 400, param: 'max_tokens' });
      expect([prefill.requests.length, decode.requests.length]).toEqual(before);
      prefill.setFault({ type: 'status', status: 500, message: `broken at ${prefill.url}` });
      const failed = await client.completions
        .create({ model: 'm', prompt: 'Say', max_tokens: 2 })
        .catch((error: unknown) => error);
      expect(failed).toMatchObject({ status: 502 });
      expect(String((failed as Error).message)).not.toContain('127.0.0.1');
      expect(prefill.ledger.outstanding()).toEqual([]);
      expect(logged(stderr()).filter((line) => !line.startsWith('info:'))).toEqual([]);
    },
    30_000,
  );
});

describe('examples/router.ts: routing on what the engines hold, and streams that outlive their decode worker', () => {
  it('vllm: prompts that share blocks go to the prefill worker holding them; a stream whose decode worker resets goes on elsewhere', async () => {
    const prefill = [
      await fake({ role: 'prefill', protocol: 'vllm', kvCache: {} }),
      await fake({ role: 'prefill', protocol: 'vllm', kvCache: {} }),
    ];
    let broken = 0;
    const decode = [
      await fake({
        role: 'decode',
        protocol: 'vllm',
        tokens: 12,
        fault: (request) =>
          request.body.stream === true && broken++ === 0 ? { type: 'reset', afterTokens: 4 } : undefined,
      }),
      await fake({ role: 'decode', protocol: 'vllm', tokens: 12 }),
    ];
    const running = await router('router', {
      PREFILL: prefill.map((worker) => worker.url).join(','),
      PREFILL_KV_EVENTS: prefill.map((worker) => worker.kvCache?.publisher.endpoint).join(','),
      DECODE: decode.map((worker) => worker.url).join(','),
    });
    const blocks = (from: number) => Array.from({ length: 64 }, (_, i) => from + i);
    // The first request of a prefix goes by load; the worker holds its blocks from then on (the
    // index expects them at once, and the engine's events confirm them): without the index
    // (no PREFILL_KV_EVENTS) the requests below would go by load, alternating.
    await running.client.completions.create({ model: 'm', prompt: blocks(1000), max_tokens: 1 });
    const holder = prefill.findIndex((worker) => worker.requests.length === 1);
    for (let i = 0; i < 3; i++) {
      await running.client.completions.create({ model: 'm', prompt: [...blocks(1000), 7, 8, i], max_tokens: 1 });
    }
    expect(prefill[holder]?.requests).toHaveLength(4);

    const stream = await running.client.completions.create({
      model: 'm',
      prompt: 'Tell me a story',
      max_tokens: 12,
      stream: true,
    });
    const { text, finish } = await read(stream);
    expect(text).toBe(Array.from({ length: 12 }, (_, i) => `tok${i} `).join(''));
    expect(finish).toBe('length');
    expect(decode[0]?.requests.some((request) => request.aborted || !request.completed)).toBe(true);
    expect(prefill.flatMap((worker) => worker.ledger.outstanding())).toEqual([]);
    expect(logged(running.stderr()).filter((line) => !line.startsWith('info:'))).toEqual([]);
  }, 30_000);
});
