import type { EngineItem, LLMEngineOutput } from '../protocol/llm-engine-output.js';
import { ResponseStream } from '../runtime/response-stream.js';

type Details = Record<string, unknown>;

function withDetails(step: IteratorResult<EngineItem>, details: Details): IteratorResult<EngineItem> {
  const usage = step.done === true ? undefined : step.value?.data?.completion_usage;
  if (usage === undefined || usage === null) return step;
  const item = step.value as EngineItem;
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
export function withPrefillUsage(stream: ResponseStream<EngineItem>, details: Details): ResponseStream<EngineItem> {
  const fix = (step: IteratorResult<EngineItem>) => withDetails(step, details);
  const iterable: AsyncIterable<EngineItem> = {
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
