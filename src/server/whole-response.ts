import type { ServerResponse } from 'node:http';
import { answerJson } from '../http/node-server.js';
import type { EngineItem } from '../protocol/annotated.js';
import { Annotated } from '../protocol/annotated.js';
import type { ResponseStream } from '../runtime/response-stream.js';
import type { ResponseWriter } from './openai-format.js';
import type { ErrorAnswer } from './pipeline/error-answers.js';

/**
 * Collects a non-streamed request's items into its answer (the worker's own body when it
 * answered whole) and sends it; a failure anywhere is answered with its status and OpenAI body
 * instead (nothing was sent before). An answer a router keeps (`settle`: the Responses store)
 * is kept before it is sent, and answered as a failure if it cannot be.
 *
 * @internal
 */
export async function answerWhole(
  stream: ResponseStream<EngineItem>,
  res: ServerResponse,
  writer: ResponseWriter,
  answerFor: (error: unknown) => ErrorAnswer,
  settle?: ((answer: Record<string, unknown>) => Promise<void>) | undefined,
): Promise<void> {
  const items: EngineItem[] = [];
  try {
    for await (const item of stream) {
      const error = Annotated.err(item);
      if (error !== undefined) throw error;
      items.push(item);
    }
  } catch (error) {
    const answer = answerFor(error);
    // answerJson leaves an answer already sent alone (a shutdown answered it meanwhile).
    answerJson(res, answer.status, writer.errorBody(answer));
    return;
  }
  const whole = writer.whole(items);
  if (settle !== undefined && writer.keeps(whole)) {
    try {
      await settle(whole);
    } catch (error) {
      const answer = answerFor(error);
      answerJson(res, answer.status, writer.errorBody(answer));
      return;
    }
  }
  answerJson(res, 200, whole);
}
