import { describe, expect, it } from 'vitest';
import { answerHandoff, withoutAnswerHandoff } from '../../../src/protocol/engines/handoff-wire.js';

describe('the handoff on the wire, over every engine', () => {
  it('a handoff field that is null names no handoff: the next place is read', () => {
    // vLLM answers `"kv_transfer_params": null` when it holds nothing for a remote decode.
    const params = { request_type: 'context_only', ctx_request_id: 3 };
    expect(answerHandoff({ kv_transfer_params: null, disaggregated_params: params }, undefined)).toBe(params);
    const choice = { index: 0, disaggregated_params: params };
    expect(answerHandoff({ kv_transfer_params: null, disaggregated_params: null }, choice)).toBe(params);
    expect(answerHandoff({ kv_transfer_params: null }, { index: 0, disaggregated_params: null })).toBeUndefined();
  });

  it('stripping the handoff from an answer keeps choices that are not objects as they are', () => {
    const params = { ctx_request_id: 3 };
    expect(
      withoutAnswerHandoff({
        id: 'a',
        kv_transfer_params: params,
        choices: [null, 'x', 7, { index: 0, text: 'y', disaggregated_params: params }],
      }),
    ).toEqual({ id: 'a', choices: [null, 'x', 7, { index: 0, text: 'y' }] });
  });
});
