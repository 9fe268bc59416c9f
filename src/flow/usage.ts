import type { Annotated } from '../protocol/annotated.js';
import type { LLMEngineOutput } from '../protocol/llm-engine-output.js';
import { ResponseStream } from '../runtime/response-stream.js';

type Item = Annotated<LLMEngineOutput>;
type Details = Record<string, unknown>;

function withDetails(step: IteratorResult<Item>, details: Details): IteratorResult<Item> {
  const usage = step.done === true ? undefined : step.value?.data?.completion_usage;
  if (usage === undefined || usage === null) return step;
  const item = step.value as Item;
  const data = item.data as LLMEngineOutput;
  return {
    done: false,
    value: {
      ...item,
      data: {
        ...data,
        completion_usage: { ...usage, prompt_tokens_details: { ...usage.prompt_tokens_details, ...details } },
      },
    },
  };
}

/**
 * Decode's stream with the prefill leg's `prompt_tokens_details` (above all `cached_tokens`)
 * in every usage it reports: the prompt was computed, and its cache hits counted, on the
 * prefill worker, so decode's own figure for them is wrong. Items without usage pass through
 * as they are; closing the stream closes decode.
 */
export function withPrefillUsage(stream: ResponseStream<Item>, details: Details): ResponseStream<Item> {
  const fix = (step: IteratorResult<Item>) => withDetails(step, details);
  const iterable: AsyncIterable<Item> = {
    [Symbol.asyncIterator]() {
      const source = stream[Symbol.asyncIterator]();
      return {
        next: () => source.next().then(fix),
        return: (value?: unknown) => source.return?.(value) ?? Promise.resolve({ value: undefined, done: true }),
      };
    },
  };
  return new ResponseStream(iterable, stream.context);
}
