// A live prompt's token ids as a simulated engine's blocks: cut into the trace's 512-token
// blocks, each named by a hash of its tokens chained on the block before it (as vLLM names a
// block by its tokens and its parent's hash), so that two prompts beginning alike begin with
// the same block ids and a simulated cache finds the prefix they share.

import { createHash } from 'node:crypto';
import { TRACE_BLOCK_TOKENS } from './trace.js';

/**
 * The block ids of a prompt of `tokens`: one per 512 tokens (the last block may be shorter), each
 * a 48-bit integer hash of the block's tokens and the id before it. A last, partial block is
 * its own content: the same tokens followed by more make another block.
 *
 * @example
 * const a = tokenBlocks(Array.from({ length: 1100 }, (_, i) => i)); // 3 ids
 * const b = tokenBlocks(Array.from({ length: 1024 }, (_, i) => i)); // a[0], a[1]
 */
export function tokenBlocks(tokens: readonly number[]): number[] {
  const blocks: number[] = [];
  const bytes = new Uint8Array(TRACE_BLOCK_TOKENS * 4);
  const view = new DataView(bytes.buffer);
  let parent = 0;
  for (let start = 0; start < tokens.length; start += TRACE_BLOCK_TOKENS) {
    const end = Math.min(start + TRACE_BLOCK_TOKENS, tokens.length);
    for (let i = start; i < end; i++) view.setUint32((i - start) * 4, (tokens[i] as number) >>> 0, true);
    const digest = createHash('sha256')
      .update(String(parent))
      .update(bytes.subarray(0, (end - start) * 4))
      .digest();
    parent = digest.readUIntBE(0, 6);
    blocks.push(parent);
  }
  return blocks;
}
