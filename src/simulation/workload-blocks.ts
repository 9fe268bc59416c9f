// A generated prompt as Mooncake's traces give it: hash ids of 512-token blocks, equal where the
// content before and inside the block is equal. A prompt is a list of segments (a system
// prompt, a document, a user's message, a tool's output), each a run of tokens with an id; two
// prompts that begin with the same segments begin with the same blocks, and a block that
// straddles two segments is its own content (a document behind another document is not the
// same block as it behind the instruction). Like the engines' prefix caches (vLLM hashes each
// full block with its parent's hash), a block's id depends on every block before it.

import { TRACE_BLOCK_TOKENS } from './trace.js';

/** A run of a prompt's tokens: the same `id` is the same text (of `tokens` tokens). */
export interface Segment {
  readonly id: number;
  readonly tokens: number;
}

/**
 * Hands out segment ids and turns prompts (lists of segments) into block hash ids: the same
 * content at the same place the same id, new content a fresh id from a counter (0, 1, 2, ...,
 * as Mooncake's remapped ids are).
 *
 * @example
 * const hasher = new BlockHasher();
 * const system = hasher.segment(1024);
 * const a = hasher.blocks([system, hasher.segment(300)]); // [0, 1, 2]
 * const b = hasher.blocks([system, hasher.segment(900)]); // [0, 1, 3, 4]
 */
export class BlockHasher {
  private segments = 0;
  private readonly ids = new Map<string, number>();

  /** A new segment of `tokens` tokens, unlike any before it. */
  segment(tokens: number): Segment {
    return { id: this.segments++, tokens };
  }

  /** The block ids of a prompt made of `segments` in order (ceil(tokens / 512) of them). */
  blocks(segments: readonly Segment[]): number[] {
    const blocks: number[] = [];
    let parent = -1;
    let key = '';
    let filled = 0;
    const close = () => {
      const full = `${parent}|${key}`;
      let id = this.ids.get(full);
      if (id === undefined) {
        id = this.ids.size;
        this.ids.set(full, id);
      }
      blocks.push(id);
      parent = id;
      key = '';
      filled = 0;
    };
    for (const segment of segments) {
      let offset = 0;
      while (offset < segment.tokens) {
        const take = Math.min(segment.tokens - offset, TRACE_BLOCK_TOKENS - filled);
        key += `${segment.id}:${offset}+${take};`;
        offset += take;
        filled += take;
        if (filled === TRACE_BLOCK_TOKENS) close();
      }
    }
    // A last, partial block is its own content: the same tokens and more are another block.
    if (filled > 0) close();
    return blocks;
  }
}

/** The tokens of a prompt made of `segments`. */
export const tokensOf = (segments: readonly Segment[]): number =>
  segments.reduce((sum, segment) => sum + segment.tokens, 0);
