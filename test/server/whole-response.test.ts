import type { ServerResponse } from 'node:http';
import { describe, expect, it } from 'vitest';
import { endpointNamed } from '../../src/endpoints/registry.js';
import type { EngineItem } from '../../src/protocol/annotated.js';
import { Annotated } from '../../src/protocol/annotated.js';
import type { LLMEngineOutput } from '../../src/protocol/llm-engine-output.js';
import type { ResponseStream } from '../../src/runtime/response-stream.js';
import { ResponseWriter } from '../../src/server/openai-format.js';
import { errorAnswer } from '../../src/server/pipeline/error-answers.js';
import { answerWhole } from '../../src/server/whole-response.js';

/** A response that keeps its status and body; `ended` says it was answered already. */
function response(ended = false) {
  const res = {
    statusCode: 0,
    body: '',
    headersSent: ended,
    destroyed: false,
    writableEnded: ended,
    writeHead(status: number) {
      res.statusCode = status;
      res.headersSent = true;
      return res;
    },
    end(text: string) {
      res.body = text;
      res.writableEnded = true;
      return res;
    },
  };
  return res;
}

async function* items(list: EngineItem[], end?: Error) {
  yield* list;
  if (end !== undefined) throw end;
}

const stream = (list: EngineItem[], end?: Error) => items(list, end) as unknown as ResponseStream<EngineItem>;
const text = (value: string) => Annotated.fromData<LLMEngineOutput>({ token_ids: [], text: value });

describe('answerWhole', () => {
  it('collects every item into one answer', async () => {
    const res = response();
    await answerWhole(
      stream([text('a'), text('b')]),
      res as unknown as ServerResponse,
      new ResponseWriter(endpointNamed('completions'), { model: 'm' }),
      errorAnswer,
    );
    expect(res.statusCode).toBe(200);
    expect(JSON.parse(res.body).choices[0].text).toBe('ab');
  });

  it('a failure anywhere, thrown or an error item, is answered with its status and body instead', async () => {
    for (const list of [
      stream([text('a')], new Error('decode broke')),
      stream([text('a'), Annotated.fromError<LLMEngineOutput>(new Error('decode broke'))]),
    ]) {
      const res = response();
      const seen: unknown[] = [];
      await answerWhole(
        list,
        res as unknown as ServerResponse,
        new ResponseWriter(endpointNamed('chat'), { model: 'm' }),
        (error) => {
          seen.push(error);
          return errorAnswer(error, 'decode');
        },
      );
      expect(seen).toHaveLength(1);
      expect(res.statusCode).toBe(500);
      expect(JSON.parse(res.body).error).toMatchObject({ message: 'decode broke', leg: 'decode' });
    }
  });

  it('an answer already ended (shutdown answered it) is left alone, success or failure', async () => {
    for (const end of [undefined, new Error('late')]) {
      const res = response(true);
      await answerWhole(
        stream([text('a')], end),
        res as unknown as ServerResponse,
        new ResponseWriter(endpointNamed('chat'), { model: 'm' }),
        errorAnswer,
      );
      expect([res.statusCode, res.body]).toEqual([0, '']);
    }
  });
});
