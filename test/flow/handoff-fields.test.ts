import { describe, expect, it } from 'vitest';
import { HANDOFF_FIELDS, HandoffFieldError, sanitizeClientRequest } from '../../src/flow/handoff-fields.js';

describe('client-supplied handoff fields', () => {
  it.each(HANDOFF_FIELDS)('%s is stripped by default', (field) => {
    const body = sanitizeClientRequest({ prompt: 'x', [field]: 'client value' });
    expect(body).toEqual({ prompt: 'x' });
  });

  it("covers every field the engines read to steer a handoff: vLLM's, TensorRT-LLM's and SGLang's", () => {
    // Written out, not taken from the list: a field missing here is a client steering the KV.
    for (const field of [
      'kv_transfer_params',
      'transfer_id',
      'disaggregated_params',
      'bootstrap_host',
      'bootstrap_port',
      'bootstrap_room',
      'bootstrap_pair_key',
      'decode_tp_size',
      'data_parallel_rank',
      'routed_dp_rank',
      'disagg_prefill_dp_rank',
      'pd_prefill_admission_ack',
      'decode_token_reservation_id',
    ]) {
      expect(sanitizeClientRequest({ prompt: 'x', [field]: 1 }), field).toEqual({ prompt: 'x' });
    }
  });

  it('a refusal of one field says "remove it"', () => {
    expect(() => sanitizeClientRequest({ prompt: 'x', transfer_id: 't' }, { clientHandoffFields: 'reject' })).toThrow(
      'The request sets "transfer_id", which only the router may set (handoff fields); remove it',
    );
  });

  it('returns the same object when there is nothing to strip', () => {
    const client = { prompt: 'x' };
    expect(sanitizeClientRequest(client)).toBe(client);
  });

  it('strips from a copy, never from the client object', () => {
    const client = { prompt: 'x', transfer_id: 't-1' };
    sanitizeClientRequest(client);
    expect(client).toEqual({ prompt: 'x', transfer_id: 't-1' });
  });

  it('can reject instead, naming every offending field', () => {
    const request = { kv_transfer_params: { remote_host: '10.0.0.9' }, prompt: 'x', bootstrap_room: 1 };
    let error: unknown;
    try {
      sanitizeClientRequest(request, { clientHandoffFields: 'reject' });
    } catch (e) {
      error = e;
    }
    expect(HandoffFieldError.is(error)).toBe(true);
    expect(error).toBeInstanceOf(HandoffFieldError);
    const typed = error as HandoffFieldError;
    expect(typed.name).toBe('HandoffFieldError');
    expect(typed.kind).toBe('client_handoff_fields');
    expect(typed.fields).toEqual(['kv_transfer_params', 'bootstrap_room']);
    expect(typed.message).toBe(
      'The request sets "kv_transfer_params", "bootstrap_room", which only the router may set (handoff fields); remove them',
    );
  });

  it('a field set to undefined or null by the client still counts as set', () => {
    expect(sanitizeClientRequest({ prompt: 'x', bootstrap_host: null })).toEqual({ prompt: 'x' });
  });

  it('takes its own list of fields', () => {
    expect(sanitizeClientRequest({ a: 1, kv_transfer_params: {} }, { fields: ['a'] })).toEqual({
      kv_transfer_params: {},
    });
  });

  it('refuses an unknown mode', () => {
    expect(() => sanitizeClientRequest({}, { clientHandoffFields: 'ignore' as 'strip' })).toThrow(
      'clientHandoffFields must be "strip" or "reject", got "ignore"',
    );
  });
});
