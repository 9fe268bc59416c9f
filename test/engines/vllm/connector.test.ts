import { describe, expect, it } from 'vitest';
import { RELEASE_MODEL, vllmNixl } from '../../../src/engines/registry.js';

describe('the vllm-nixl connector', () => {
  it('a release names the model disagg-release-kv (as documented), which no worker serves', () => {
    const params = { do_remote_prefill: true, remote_engine_id: 'e', remote_block_ids: [1] };
    expect(RELEASE_MODEL).toBe('disagg-release-kv');
    expect(vllmNixl.release?.({ model: 'm', prompt: 'p' }, params)).toMatchObject({
      model: 'disagg-release-kv',
      kv_transfer_params: params,
    });
  });
});
