// The router's own tokenizer at the proxy's start: found (a directory, or a model fetched from
// the Hugging Face hub or its cache) and loaded before the proxy listens, each step logged once.
import type { Logger } from '../../runtime/logger.js';
import { TokenizerPool } from '../../tokenize/tokenizer-pool.js';
import { findTokenizer } from '../../tokenize/tokenizer-source.js';

/**
 * Finds `--tokenizer`'s files (see {@link findTokenizer}), logs where from, and starts the
 * tokenizer's `threads`.
 *
 * @throws {TokenizerError} one line saying what to change when it cannot be found or loaded.
 * @internal
 */
export async function startRouterTokenizer(value: string, threads: number, logger: Logger): Promise<TokenizerPool> {
  const found = await findTokenizer(value);
  if (found.from === 'hub') {
    logger.info(
      { tokenizer: value, from: found.hub, to: found.dir, files: found.files, bytes: found.bytes, ms: found.ms },
      "The router's tokenizer was downloaded from the Hugging Face hub into its cache",
    );
  } else if (found.from === 'cache' && found.why === 'unreachable') {
    // Started all the same, as huggingface_hub does; said, since a newer revision may be missed.
    logger.warn(
      { tokenizer: value, dir: found.dir, commit: found.commit, why: found.detail },
      "The Hugging Face hub is out of reach: the router's tokenizer is from the cache, as last downloaded",
    );
  } else if (found.from === 'cache') {
    logger.info(
      { tokenizer: value, dir: found.dir, commit: found.commit, why: found.why },
      "The router's tokenizer is from the Hugging Face cache",
    );
  }
  const pool = await TokenizerPool.start({ dir: found.dir, threads });
  const { encoder } = pool;
  // The JavaScript port gives the same ids, only slower: said once, for an operator to fix.
  if (encoder.kind === 'js') {
    logger.warn(
      { tokenizer: value, why: encoder.why },
      "The router's tokenizer runs on the JavaScript port: Hugging Face's native tokenizer (the optional package `tokenizers`) did not load; prompts are tokenized 2 to 3.5 times slower",
    );
  } else {
    logger.info({ tokenizer: value, encoder: encoder.kind, parts: encoder.parts }, "The router's tokenizer is loaded");
  }
  return pool;
}
