// What becomes of a worker's own words: a client still gets them (a worker's 4xx is the
// request's fault, told as the worker told it), without any address they hold; no log line
// gets them (vLLM's errors echo the prompt), only their length.
import OpenAI from 'openai';
import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import type { EngineName } from '../../src/engines/registry.js';
import { createProxy, type ProxyServer } from '../../src/server/proxy.js';
import type { Fault } from '../../src/testing/index.js';
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

/** What a client sent and a worker's error text echoed: found in no log line. */
const SECRET = 'SECRET-PROMPT-7f3a';
/** vLLM's context-length refusal, which quotes what it was sent. */
const ECHO = `This model's maximum context length is 4096 tokens; the prompt 'Tell me ${SECRET} twice' is too long`;

let proxies: ProxyServer[] = [];
afterEach(async () => {
  await Promise.all(proxies.map((proxy) => proxy.close({ gracePeriodMs: 0, drainDelayMs: 0 })));
  proxies = [];
});

/**
 * A proxy in front of a prefill and `decodes` decode workers (the first with `decodeFault`),
 * logging every level through a pino logger of its own (`serializers`: as `disagg serve`'s, or
 * pino's own as a library user's may be), each line kept as written.
 */
async function logged(
  protocol: EngineName,
  faults: { prefill?: Fault; decode?: Fault },
  options: { decodes?: number; migration?: boolean; serializers?: 'cli' | 'pino' } = {},
) {
  const prefill = await fakes.start({
    role: 'prefill',
    protocol,
    ...(faults.prefill ? { fault: faults.prefill } : {}),
  });
  const decode = [];
  for (let i = 0; i < (options.decodes ?? 1); i++) {
    const fault = i === 0 ? faults.decode : undefined;
    decode.push(await fakes.start({ role: 'decode', protocol, tokens: 6, ...(fault ? { fault } : {}) }));
  }
  const lines: string[] = [];
  const logger = pino(
    {
      level: 'trace',
      ...(options.serializers === 'pino' ? {} : { serializers: { err: pino.stdSerializers.errWithCause } }),
    },
    { write: (line: string) => void lines.push(line) },
  );
  const proxy = createProxy({
    connector: protocol,
    prefill: [{ url: prefill.url, ...(protocol === 'sglang' ? { bootstrapPort: prefill.bootstrapPort } : {}) }],
    decode: decode.map((worker) => ({ url: worker.url })),
    selection: 'round-robin',
    logger,
    ...(options.migration ? { migration: { limit: 1 } } : {}),
  });
  proxies.push(proxy);
  const url = await proxy.listen(0);
  const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'x', maxRetries: 0 });
  // SGLang's prefill keeps the KV for a decode that never came to take it: its own timeout frees it.
  if (protocol === 'sglang') fakes.leaveKv(prefill);
  return { client, lines, prefill, decode };
}

/** Streams a completion to its end; its text, or the failure the client was told. */
async function streamed(client: OpenAI): Promise<{ text: string; failure?: unknown }> {
  let text = '';
  try {
    const stream = await client.completions.create({
      model: 'fake-model',
      prompt: `Tell me ${SECRET} twice`,
      max_tokens: 6,
      stream: true,
    });
    for await (const chunk of stream) text += chunk.choices[0]?.text ?? '';
    return { text };
  } catch (failure) {
    return { text, failure };
  }
}

/** Every object in a parsed log line, nested ones included. */
function* objectsIn(value: unknown): Generator<Record<string, unknown>> {
  if (typeof value !== 'object' || value === null) return;
  yield value as Record<string, unknown>;
  for (const inner of Object.values(value)) yield* objectsIn(inner);
}

/** No line of `lines` holds the secret, and no worker's answer in them has a stack (an expected answer, not a crash). */
function expectNoWorkerText(lines: string[]) {
  expect(lines.length).toBeGreaterThan(0);
  for (const line of lines) {
    expect(line).not.toContain(SECRET);
    for (const object of objectsIn(JSON.parse(line))) {
      if (object.type === 'UpstreamError' || object.workerTextLength !== undefined) {
        expect(object, line).not.toHaveProperty('stack');
      }
    }
  }
}

describe("a worker's words are in no log line, at any level; the client still gets them", () => {
  for (const protocol of ['vllm', 'sglang'] as const satisfies readonly EngineName[]) {
    it(`${protocol}: a decode 400 that echoes the prompt reaches the client whole; the log has its length, code and status`, async () => {
      const { client, lines } = await logged(protocol, { decode: { type: 'status', status: 400, message: ECHO } });
      const { failure } = await streamed(client);
      expect(failure).toMatchObject({ status: 400 });
      expect((failure as Error).message).toContain(ECHO);
      expectNoWorkerText(lines);
      const finished = lines.map((line) => JSON.parse(line)).find((line) => line.msg === 'request finished');
      expect(finished.err).toEqual({
        type: 'UpstreamError',
        error: expect.stringContaining(`answered 400: [the worker's text: ${ECHO.length} characters]`),
        code: 'DISAGG_UPSTREAM_STATUS',
        status: 400,
        workerTextLength: ECHO.length,
      });
    });

    it(`${protocol}: a prefill 400 that echoes the prompt (a PrefillError around it) reaches the client whole, no log line`, async () => {
      const { client, lines } = await logged(protocol, { prefill: { type: 'status', status: 400, message: ECHO } });
      const { failure } = await streamed(client);
      expect(failure).toMatchObject({ status: 400 });
      expect((failure as Error).message).toContain(ECHO);
      expectNoWorkerText(lines);
      const finished = lines.map((line) => JSON.parse(line)).find((line) => line.msg === 'request finished');
      expect(finished.err).toMatchObject({ type: 'PrefillError', status: 400, workerTextLength: ECHO.length });
    });

    it(`${protocol}: an error event that echoes the prompt mid-stream reaches the client, no log line`, async () => {
      const { client, lines } = await logged(protocol, {
        decode: { type: 'error-event', afterTokens: 2, message: ECHO },
      });
      const { text, failure } = await streamed(client);
      expect(text).not.toBe('');
      expect(String((failure as Error | undefined)?.message)).toContain(SECRET);
      expectNoWorkerText(lines);
    });

    it(`${protocol}: an error event that echoes the prompt, continued on another worker (migration): no log line`, async () => {
      const { client, lines } = await logged(
        protocol,
        { decode: { type: 'error-event', afterTokens: 2, message: ECHO } },
        { decodes: 2, migration: true },
      );
      const { text, failure } = await streamed(client);
      expect(failure).toBeUndefined();
      expect(text).toBe('tok0 tok1 tok2 tok3 tok4 tok5 ');
      expect(lines.some((line) => line.includes('continued on another worker'))).toBe(true);
      expectNoWorkerText(lines);
    });
  }

  it("a library user's own pino logger, with pino's default serializers, gets no worker text either", async () => {
    const { client, lines } = await logged(
      'vllm',
      { decode: { type: 'status', status: 400, message: ECHO } },
      { serializers: 'pino' },
    );
    expect((await streamed(client)).failure).toMatchObject({ status: 400 });
    expectNoWorkerText(lines);
  });
});
