// The pieces of the endpoints' body schemas: only the fields whose type and range the engines
// agree on (OpenAI's, vLLM's and SGLang's own checks). zod's functional build (`zod/mini`),
// bundled: only the checks used here are loaded (the whole of zod, loaded from node_modules,
// was 8 MB of an idle proxy's resident set).

import * as z from 'zod/mini';

export const int = (min: number) => z.int().check(z.minimum(min));
export const number = (...checks: Parameters<ReturnType<typeof z.number>['check']>) => z.number().check(...checks);
export const tokenIds = z.array(z.int().check(z.minimum(0))).check(z.minLength(1));

/** The longest model name a request may send: Hugging Face ids are at most 96 characters, served paths a little longer. */
export const MAX_MODEL_NAME = 256;

/**
 * The characters of a model name: what Hugging Face ids (`org/name`), served model paths
 * (`/models/llama-3.1`), LoRA adapters and tags (`name:8b`, `name@rev`) use. No space, no
 * control character: a name reaches logs, traces and error messages.
 */
const MODEL_CHARS = /^[\w.:/@+=~-]+$/;

/**
 * A request's `model`: 1 to {@link MAX_MODEL_NAME} characters of {@link MODEL_CHARS}, checked
 * before any worker (engines that serve any name, SGLang's, would otherwise take a megabyte).
 */
export const modelName = z
  .string()
  .check(
    z.minLength(1),
    z.maxLength(MAX_MODEL_NAME),
    z.regex(MODEL_CHARS, { error: 'must hold only letters, digits and . _ - / : @ + = ~' }),
  );

/** The longest response id a client may choose (`request_id`): OpenAI's and vLLM's are under 64 characters. */
export const MAX_RESPONSE_ID = 64;

/**
 * A response id a client names (`request_id`, which vLLM and SGLang take as the answer's id,
 * and `previous_response_id`): up to {@link MAX_RESPONSE_ID} letters, digits and `_ - . :`.
 * The router remembers ids it served, so their size is the client's to choose only this far.
 */
export const responseId = z
  .string()
  .check(
    z.minLength(1),
    z.maxLength(MAX_RESPONSE_ID),
    z.regex(/^[\w.:-]+$/, { error: 'must hold only letters, digits and _ - . :' }),
  );

/** The sampling fields OpenAI's routes take at the top and SGLang's `/generate` in `sampling_params`. */
export const samplingRanges = {
  temperature: z.nullish(number(z.minimum(0))),
  top_p: z.nullish(number(z.gt(0), z.maximum(1))),
  top_k: z.nullish(int(-1)),
  min_p: z.nullish(number(z.minimum(0), z.maximum(1))),
  stop: z.nullish(z.union([z.string(), z.array(z.string())])),
  ignore_eos: z.nullish(z.boolean()),
};

/** The fields OpenAI's generation routes share. */
export const sampling = {
  ...samplingRanges,
  model: z.nullish(modelName),
  stream: z.nullish(z.boolean()),
  stream_options: z.nullish(
    z.looseObject({ include_usage: z.nullish(z.boolean()), continuous_usage_stats: z.nullish(z.boolean()) }),
  ),
  max_tokens: z.nullish(int(1)),
  min_tokens: z.nullish(int(0)),
  n: z.nullish(int(1)),
  presence_penalty: z.nullish(number(z.minimum(-2), z.maximum(2))),
  frequency_penalty: z.nullish(number(z.minimum(-2), z.maximum(2))),
  repetition_penalty: z.nullish(number(z.gt(0))),
  seed: z.nullish(z.union([z.int(), z.bigint()])),
};

/** Whether `body` has `field` set (neither absent nor null). */
export const has = (body: Readonly<Record<string, unknown>>, field: string) =>
  body[field] !== undefined && body[field] !== null;

/** The output cap of a one-token prefill leg, under both OpenAI names (every engine reads one), and one answer. */
export const ONE_TOKEN = Object.freeze({ max_tokens: 1, max_completion_tokens: 1, n: 1 });
