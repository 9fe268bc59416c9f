import { describe, expect, it } from 'vitest';
import { decodeRequest, prefillRequest } from '../../src/flow/request-shaping.js';

describe('prefillRequest: a copy with a one-token budget', () => {
  it('caps both token limits at one, answers in one piece, once', () => {
    const client = {
      model: 'm',
      prompt: 'Hello',
      max_tokens: 200,
      max_completion_tokens: 300,
      stream: true,
      stream_options: { include_usage: true },
      n: 3,
      best_of: 4,
      temperature: 0.2,
    };
    expect(prefillRequest(client)).toEqual({
      model: 'm',
      prompt: 'Hello',
      max_tokens: 1,
      max_completion_tokens: 1,
      stream: false,
      n: 1,
      temperature: 0.2,
    });
  });

  it('removes min_tokens, which a one-token budget contradicts', () => {
    expect(prefillRequest({ prompt: 'x', min_tokens: 5 })).not.toHaveProperty('min_tokens');
  });

  it('sets the budget even when the client set none', () => {
    expect(prefillRequest({ messages: [] })).toMatchObject({ max_tokens: 1, max_completion_tokens: 1 });
  });

  it("leaves the client's object as it was", () => {
    const client = { prompt: 'x', max_tokens: 9, stream: true, min_tokens: 2 };
    const before = structuredClone(client);
    prefillRequest(client);
    expect(client).toEqual(before);
  });

  it.each([null, 'prompt', [1], undefined])('refuses %j as a body', (body) => {
    expect(() => prefillRequest(body as never)).toThrow(/A request body must be a JSON object/);
  });
});

describe("decodeRequest: the client's values exactly, plus the handoff", () => {
  it('an absent max_tokens stays absent, present values are unchanged', () => {
    const client = { prompt: 'x', stream: true, min_tokens: 4, n: 2 };
    const body = decodeRequest(client, { kv_transfer_params: { remote_engine_id: 'e1' } });
    expect(body).toEqual({ ...client, kv_transfer_params: { remote_engine_id: 'e1' } });
    expect(body).not.toHaveProperty('max_tokens');
  });

  it('leaves out handoff fields that are undefined, and does not touch the client object', () => {
    const client = { prompt: 'x', max_tokens: 7 };
    const body = decodeRequest(client, { bootstrap_room: undefined, bootstrap_host: 'h' });
    expect(body).toEqual({ prompt: 'x', max_tokens: 7, bootstrap_host: 'h' });
    expect(client).toEqual({ prompt: 'x', max_tokens: 7 });
  });

  it('carries a 64-bit room as a bigint, never as a lossy number', () => {
    const room = 2n ** 62n + 1n;
    expect(decodeRequest({}, { bootstrap_room: room }).bootstrap_room).toBe(room);
  });
});
