// `disagg tokenizer fetch ID`: puts a model's tokenizer into the Hugging Face cache ahead of
// time (an image's build, an init container) and prints its directory, so that `disagg serve
// --tokenizer ID` later starts from the cache, with HF_HUB_OFFLINE=1 without any network.
import { TokenizerError } from '../tokenize/tokenizer-pool.js';
import { findTokenizer } from '../tokenize/tokenizer-source.js';

/** `disagg tokenizer --help`. */
export const TOKENIZER_USAGE = `Usage: disagg tokenizer fetch <org/name[@revision] | DIR>

Downloads a Hugging Face model's tokenizer (tokenizer.json, tokenizer_config.json, and
special_tokens_map.json and chat_template.jinja where the model has them) into the Hugging Face
cache, as 'disagg serve --tokenizer' does at its start, and prints the snapshot's directory.
A later 'disagg serve --tokenizer <the same id>' reads it from the cache (with HF_HUB_OFFLINE=1,
without asking the hub). A directory is checked for tokenizer.json and printed.

Environment:
  HF_TOKEN        a read token, for a gated or private model
  HF_ENDPOINT     the hub or a mirror of it (https://huggingface.co)
  HF_HOME         the cache is HF_HOME/hub (~/.cache/huggingface/hub); HF_HUB_CACHE names it directly
  HF_HUB_OFFLINE  1: only the cache, no request
`;

/** Runs `disagg tokenizer <args>`; resolves with the exit code. */
export async function tokenizerCommand(args: string[]): Promise<number> {
  const [action, value, ...extra] = args;
  if (action === undefined || action === '--help' || action === '-h') {
    console.log(TOKENIZER_USAGE);
    return 0;
  }
  if (action !== 'fetch' || value === undefined || value.startsWith('-') || extra.length > 0) {
    console.error(`disagg tokenizer: expected 'fetch <org/name[@revision] | DIR>'\n\n${TOKENIZER_USAGE}`);
    return 2;
  }
  try {
    const found = await findTokenizer(value);
    if (found.from === 'hub') {
      console.error(
        `disagg tokenizer: downloaded ${found.files.join(', ')} (${found.bytes} bytes) from ${found.hub} in ${found.ms} ms`,
      );
    } else if (found.from === 'cache') {
      console.error(`disagg tokenizer: ${value} is in the Hugging Face cache (commit ${found.commit})`);
    }
    // The directory alone on stdout: `dir=$(npx disagg tokenizer fetch ...)`.
    console.log(found.dir);
    return 0;
  } catch (error) {
    if (!TokenizerError.is(error)) throw error;
    console.error(`disagg tokenizer: ${asFetch(error.message)}`);
    return 1;
  }
}

/**
 * A tokenizer error as this command says it: the messages are worded for `disagg serve
 * --tokenizer`, so the flag's name and the advice to run this very command go.
 *
 * @example
 * asFetch('--tokenizer org/m: the hub is out of reach: check the network, or download it beforehand (npx disagg tokenizer fetch org/m) into that cache');
 * // 'org/m: the hub is out of reach: check the network, or download it beforehand into that cache'
 */
export function asFetch(message: string): string {
  return message.replace(/^--tokenizer /, '').replace(/ \(npx disagg tokenizer fetch [^)]*\)/g, '');
}
