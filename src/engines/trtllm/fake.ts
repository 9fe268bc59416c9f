import { oneTokenAnswer } from '../../fakes/fake-formats.js';
import type { FakeProtocol } from '../../fakes/fake-protocol.js';

/** The request fields TensorRT-LLM's OpenAI server knows, per route; it refuses any other. */
const COMMON = [
  'model',
  'n',
  'stream',
  'stream_options',
  'stop',
  'seed',
  'temperature',
  'top_p',
  'top_k',
  'presence_penalty',
  'frequency_penalty',
  'logit_bias',
  'logprobs',
  'user',
  'max_tokens',
  'disaggregated_params',
  'response_format',
  'ignore_eos',
];
const FIELDS: Record<string, ReadonlySet<string>> = {
  '/v1/completions': new Set([...COMMON, 'prompt', 'echo', 'best_of', 'suffix']),
  '/v1/chat/completions': new Set([
    ...COMMON,
    'messages',
    'max_completion_tokens',
    'top_logprobs',
    'tools',
    'tool_choice',
    'parallel_tool_calls',
  ]),
};

let nextRequestId = 1;

/**
 * TensorRT-LLM, context first: a `context_only` request computes one token, keeps its KV and
 * answers whole with the handoff on the choice (`choices[0].disaggregated_params`: the
 * `ctx_request_id`, the first token, and where the generation server fetches the KV); a
 * `generation_only` request takes that KV first. As its OpenAI server does, it refuses fields
 * it does not know (HTTP 400), so a router must send only the client's fields and the handoff.
 */
export const fakeTrtllm: FakeProtocol = {
  name: 'trtllm',
  // OpenAI's completions and chat, and Anthropic's Messages, which it serves by translating
  // them to chat; trtllm-serve's openai_server.py registers none of the pooling APIs.
  unsupported: {
    generate: "SGLang's native API",
    responses:
      'Not modelled: recent trtllm-serve has a /v1/responses, which the connector refuses disaggregated (TRT-LLM #18289)',
    count_tokens: "Not modelled: Anthropic's token count",
    embeddings: 'No pooling APIs in trtllm-serve',
    rerank: 'No pooling APIs in trtllm-serve',
    score: 'No pooling APIs in trtllm-serve',
    classify: 'No pooling APIs in trtllm-serve',
    pooling: 'No pooling APIs in trtllm-serve',
    tokenize: 'No tokenizer routes in trtllm-serve',
    detokenize: 'No tokenizer routes in trtllm-serve',
  },
  isPrefillCall: (body) =>
    (body.disaggregated_params as { request_type?: unknown } | undefined)?.request_type === 'context_only',

  refuse(path, body) {
    const known = FIELDS[path];
    const unknown = known === undefined ? [] : Object.keys(body).filter((field) => !known.has(field));
    return unknown.length === 0
      ? undefined
      : `${unknown.map((f) => `"${f}"`).join(', ')}: Extra inputs are not permitted`;
  },

  async prefill(worker, res, record) {
    const cached = await worker.computePrompt(record);
    if (res.destroyed) return;
    const ctxRequestId = nextRequestId++;
    const key = `ctx-${ctxRequestId}`;
    worker.ledger.commit(key, record.requestId ?? key, record);
    worker.strandLater(key);
    record.completed = true;
    const answer = oneTokenAnswer(record, worker.options.model, worker.answerFor(record), cached, {
      name: 'trtllm',
    }) as {
      choices?: Array<Record<string, unknown>>;
    };
    // A translated route's answer has no choice to carry the handoff: answered as it is.
    if (answer.choices === undefined) return worker.answerJson(res, 200, answer);
    const [choice] = answer.choices;
    worker.answerJson(res, 200, {
      ...answer,
      choices: [
        {
          ...choice,
          disaggregated_params: {
            request_type: 'context_only',
            first_gen_tokens: [1],
            ctx_request_id: ctxRequestId,
            encoded_opaque_state: 'b3BhcXVl',
            draft_tokens: null,
            ctx_info_endpoint: `http://${worker.host}:${worker.port}`,
          },
        },
      ],
    });
  },

  kvSources(body) {
    const params = body.disaggregated_params as Record<string, unknown> | undefined;
    if (params?.request_type !== 'generation_only') return [];
    return [
      {
        url: `${String(params.ctx_info_endpoint)}/fake/kv/claim`,
        payload: { key: `ctx-${String(params.ctx_request_id)}` },
      },
    ];
  },

  endpoints: {
    '/fake/kv/claim': (worker, res, body) => {
      const key = String(body.key);
      if (worker.ledger.claim(key)) worker.answerJson(res, 200, { claimed: key });
      else worker.answerError(res, 404, `no KV held for ${key}`);
    },
  },
};
