// One registry of engines, and one contract every engine of it keeps: its fake workers, fronted
// by the proxy with that connector, serve a streamed and a whole completion and a chat, and
// leave no KV behind.
import OpenAI from 'openai';
import { afterEach, describe, expect, it } from 'vitest';
import { ENGINE_NAMES, ENGINES, engineOf } from '../../src/engines/registry.js';
import { HANDOFF_FIELDS } from '../../src/flow/handoff-fields.js';
import { answerHandoff, withoutAnswerHandoff } from '../../src/protocol/engines/handoff-wire.js';
import { ENGINE_WIRES } from '../../src/protocol/engines/wires.js';
import { checkWorker, SETTINGS } from '../../src/server/options.js';
import { createProxy, type ProxyServer } from '../../src/server/proxy.js';
import { fakeWorkers } from '../support/http.js';

const fakes = fakeWorkers();
let proxies: ProxyServer[] = [];
afterEach(async () => {
  await Promise.all(proxies.map((proxy) => proxy.close({ gracePeriodMs: 0, drainDelayMs: 0 })));
  proxies = [];
});

describe('the engine registry', () => {
  it('--connector takes exactly its names, and its help names every engine', () => {
    const setting = SETTINGS.find((each) => each.key === 'connector');
    expect(setting?.arg).toBe(ENGINE_NAMES.join('|'));
    for (const engine of ENGINES) {
      expect(setting?.parse(engine.name)).toBe(engine.name);
      expect(setting?.help).toContain(engine.title);
    }
    expect(() => engineOf('tgi' as never)).toThrow('No engine is named "tgi": vllm, sglang, trtllm');
  });

  it("a worker entry is checked against the fields of every engine, of their kinds: SGLang's port and DP rank and size whole numbers, names, hosts and KV event endpoints non-empty strings", () => {
    const sglang = { connector: 'sglang' as const, bootstrapPort: 8998 };
    const full = {
      url: 'http://p0:30000',
      name: 'p0',
      bootstrapHost: 'p0-boot',
      bootstrapPort: 8999,
      dpRank: 1,
      dpSize: 2,
      kvEvents: 'tcp://p0:5557',
      kvEventsReplay: 'tcp://p0:5558',
    };
    // The DP rank is also the worker's well-known attribute, where routing reads it.
    expect(checkWorker('prefill', full, sglang)).toEqual({ ...full, attributes: { 'disagg.ai/dp-rank': '1' } });
    for (const [field, value, kind] of [
      ['bootstrapPort', '8999', 'a whole number'],
      ['dpRank', 0.5, 'a whole number'],
      ['dpSize', '2', 'a whole number'],
      ['bootstrapHost', 5, 'a non-empty string'],
      ['name', 5, 'a non-empty string'],
      ['name', '', 'a non-empty string'],
      ['kvEvents', 5557, 'a non-empty string'],
      ['kvEventsReplay', true, 'a non-empty string'],
    ] as const) {
      expect(() => checkWorker('prefill', { ...full, [field]: value }, sglang), field).toThrow(
        `has a worker whose ${field} is not ${kind}`,
      );
    }
    const decode = { url: 'http://d0:8000', name: 'd0', kvEvents: 'tcp://d0:5557', kvEventsReplay: 'tcp://d0:5558' };
    expect(checkWorker('decode', decode, sglang)).toEqual(decode);
    for (const field of ['name', 'kvEvents', 'kvEventsReplay']) {
      expect(() => checkWorker('decode', { ...decode, [field]: 1 }, sglang), field).toThrow(
        `has a worker whose ${field} is not a non-empty string`,
      );
    }
  });

  it("the registry is the wire list's engines, in its order, each with its wire facts", () => {
    expect(ENGINES.map((each) => each.name)).toEqual(ENGINE_WIRES.map((each) => each.name));
    for (const [i, each] of ENGINES.entries()) expect(ENGINE_WIRES[i]?.handoff).toBe(each.handoff);
  });

  it.each(ENGINE_NAMES)('%s: every request field of its handoff is one a client may not set', (name) => {
    for (const field of engineOf(name).handoff.requestFields) expect(HANDOFF_FIELDS).toContain(field);
  });

  it.each(ENGINE_NAMES)('%s: a prefill answer carrying its handoff is read, and stripped for the client', (name) => {
    const { answerFields, choiceFields } = engineOf(name).handoff;
    const params = { engine: name };
    for (const field of answerFields) {
      const body = { id: 'a', [field]: params, choices: [{ index: 0, text: 'x' }] };
      expect(answerHandoff(body, body.choices[0])).toBe(params);
      expect(withoutAnswerHandoff(body)).toEqual({ id: 'a', choices: [{ index: 0, text: 'x' }] });
    }
    for (const field of choiceFields) {
      const choice = { index: 0, text: 'x', [field]: params };
      const body = { id: 'a', choices: [choice] };
      expect(answerHandoff(body, choice)).toBe(params);
      expect(withoutAnswerHandoff(body)).toEqual({ id: 'a', choices: [{ index: 0, text: 'x' }] });
    }
    expect(answerHandoff({ id: 'a', choices: [] }, undefined)).toBeUndefined();
  });

  it.each(ENGINE_NAMES)(
    '%s: its fakes behind the proxy serve a streamed completion, a whole one and a chat, and keep no KV',
    async (name) => {
      const prefill = await fakes.start({ role: 'prefill', protocol: name });
      const decode = await fakes.start({ role: 'decode', protocol: name, tokens: 3 });
      const proxy = createProxy({
        connector: name,
        prefill: [
          { url: prefill.url, ...(engineOf(name).prefillBootstrap ? { bootstrapPort: prefill.bootstrapPort } : {}) },
        ],
        decode: [{ url: decode.url }],
      });
      proxies.push(proxy);
      const url = await proxy.listen(0);
      const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'x', maxRetries: 0 });
      let streamed = '';
      for await (const chunk of await client.completions.create({ model: 'fake-model', prompt: 'Say', stream: true })) {
        streamed += chunk.choices[0]?.text ?? '';
      }
      expect(streamed).toBe('tok0 tok1 tok2 ');
      const whole = await client.completions.create({ model: 'fake-model', prompt: 'Say' });
      expect(whole.choices[0]?.text).toBe('tok0 tok1 tok2 ');
      const chat = await client.chat.completions.create({
        model: 'fake-model',
        messages: [{ role: 'user', content: 'Hi' }],
      });
      expect(chat.choices[0]?.message.content).toBe('tok0 tok1 tok2 ');
      expect(prefill.requests).toHaveLength(3);
      expect(decode.requests).toHaveLength(3);
      expect(prefill.ledger.outstanding()).toEqual([]);
    },
  );
});
