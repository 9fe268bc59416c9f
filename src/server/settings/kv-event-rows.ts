// What precise-prefix routes on: the engines' KV cache events and the router's own tokenizer.

import { nonNegativeMs, port, positiveInteger, text } from './parsers.js';
import { inGroup } from './setting.js';

/** The settings of `--help`'s KV events group. */
export const KV_EVENT_ROWS = inGroup('KV events', [
  {
    key: 'kvEvents.port',
    flag: 'kv-events-port',
    arg: 'N',
    help: "follow each worker's KV cache events at tcp://<worker host>:N (DP rank r at N + r), as vLLM and SGLang publish them with --kv-events-config; what precise-prefix routes on; needs zeromq",
    parse: port,
  },
  {
    key: 'kvEvents.replayPort',
    flag: 'kv-events-replay-port',
    arg: 'N',
    help: "the workers' KV event replay port (their replay_endpoint): events missed at start or lost on the way are asked for again",
    parse: port,
  },
  {
    key: 'kvEvents.topic',
    flag: 'kv-events-topic',
    arg: 'TOPIC',
    help: 'the KV event topic prefix to follow (the engines\' "topic")',
    shownDefault: 'every topic',
    parse: text,
  },
  {
    key: 'kvEvents.silenceMs',
    flag: 'kv-events-silence-ms',
    arg: 'MS',
    help: "a worker's KV view is blind (untrusted, warned of, counted in disagg_kv_views_blind_total) when no event came within this long of a prompt it computed: a wrong port or an engine without --kv-events-config (0: off)",
    default: 30_000,
    parse: nonNegativeMs,
  },
  {
    key: 'tokenizer.dir',
    flag: 'tokenizer',
    arg: 'DIR|ID',
    help: "the model's Hugging Face tokenizer: a directory holding tokenizer.json and tokenizer_config.json (its chat template), or a model id (org/name, org/name@revision) downloaded once into the Hugging Face cache (HF_HOME; HF_TOKEN, HF_ENDPOINT and HF_HUB_OFFLINE honoured); precise-prefix then matches text and chat prompts to the engines' blocks, tokenized off the event loop",
    parse: text,
  },
  {
    key: 'tokenizer.threads',
    flag: 'tokenizer-threads',
    arg: 'N',
    help: 'worker threads that tokenize',
    default: 1,
    parse: positiveInteger,
  },
]);
