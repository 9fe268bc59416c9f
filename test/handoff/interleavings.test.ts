import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { PrefillError } from '../../src/handoff/prefill-error.js';
import { PrefillTask } from '../../src/handoff/prefill-task.js';
import { Annotated } from '../../src/protocol/annotated.js';
import { LLMEngineOutput } from '../../src/protocol/llm-engine-output.js';
import { Controller } from '../../src/runtime/controller.js';
import {
  decodeStream,
  deferred,
  flush,
  type Item,
  isPending,
  recordingLogger,
  ScriptedSource,
  token,
} from '../support/async.js';
import { propertyOptions } from '../support/property.js';

/** What the decode worker sends, in order; at most one of the last two kinds, last. */
const decodeItems = fc
  .tuple(
    fc.array(
      fc.oneof(
        fc.integer({ min: 0, max: 1000 }).map((id) => token(id)),
        fc.constant<Item>({ event: 'metrics', comment: ['{}'] }),
      ),
      { maxLength: 6 },
    ),
    fc.constantFrom<'terminal' | 'decode-error' | 'finish-error' | 'cancelled' | 'none'>(
      'terminal',
      'decode-error',
      'finish-error',
      'cancelled',
      'none',
    ),
    fc.boolean(),
  )
  .map(([tokens, last, ends]) => {
    const tail: Item[] = {
      terminal: [Annotated.fromData(LLMEngineOutput.length())],
      'decode-error': [Annotated.fromError('decode worker lost')],
      'finish-error': [Annotated.fromData(LLMEngineOutput.error('decode OOM'))],
      cancelled: [Annotated.fromData(LLMEngineOutput.cancelled())],
      none: [],
    }[last];
    return { items: [...tokens, ...tail], ends };
  });

type Step = 'deliver' | 'prefill' | 'pull' | 'close';

/**
 * A schedule: the order in which decode delivers its next item, prefill settles, and the
 * consumer pulls (or closes the stream early).
 */
const schedule = fc.record({
  decode: decodeItems,
  prefillFails: fc.boolean(),
  steps: fc.array(fc.constantFrom<Step>('deliver', 'deliver', 'prefill', 'pull', 'pull', 'close'), {
    maxLength: 30,
  }),
});

const isFailureData = (item: Item) => {
  const reason = item?.data?.finish_reason;
  return reason === 'cancelled' || (typeof reason === 'object' && reason !== null);
};

describe('every interleaving of decode items, prefill outcome and consumer', () => {
  it('keeps order, ends exactly once, never reports success after a prefill failure, and cleans up', async () => {
    await fc.assert(
      fc.asyncProperty(schedule, async ({ decode, prefillFails, steps }) => {
        const prefill = deferred();
        const task = PrefillTask.spawn(prefill.promise, { logger: recordingLogger().logger });
        const context = new Controller('client');
        const decodeContext = new Controller('decode');
        const source = new ScriptedSource();
        const response = await task.forwardDecode(Promise.resolve(decodeStream(source, decodeContext)), context);
        const iterator = response[Symbol.asyncIterator]();

        const pending = [...decode.items];
        let sourceEnded = false;
        let prefillSettled = false;
        let closedEarly = false;
        const pulls: Promise<IteratorResult<Item>>[] = [];
        const settle = () => {
          if (prefillSettled) return;
          prefillSettled = true;
          if (prefillFails) prefill.reject(new Error('prefill connection lost'));
          else prefill.resolve();
        };
        const deliver = () => {
          const item = pending.shift();
          if (item !== undefined) source.push(item);
          else if (decode.ends && !sourceEnded) {
            sourceEnded = true;
            source.end();
          }
        };

        for (const step of steps) {
          if (step === 'deliver') deliver();
          else if (step === 'prefill') settle();
          else if (step === 'pull') pulls.push(iterator.next());
          else if (!closedEarly && pulls.length > 0) {
            closedEarly = true;
            pulls.push(iterator.return?.() as Promise<IteratorResult<Item>>);
          }
          await flush();
        }
        // Let everything else happen, then read to the end: the stream must always end.
        settle();
        while (pending.length > 0) deliver();
        deliver();
        await flush();
        const outputs: Item[] = [];
        let ended = false;
        const read = async (pull: Promise<IteratorResult<Item>>) => {
          if (await isPending(pull)) return false;
          const result = await pull;
          if (result.done) ended = true;
          else {
            expect(ended).toBe(false); // nothing after the end
            outputs.push(result.value);
          }
          return true;
        };
        for (const pull of pulls) {
          // A pull may stay pending only while a succeeded prefill forwards a decode that never ends.
          if (!(await read(pull))) {
            expect(decode.ends || prefillFails).toBe(false);
            return;
          }
        }
        for (let guard = 0; !ended && guard < 20; guard++) {
          if (!(await read(iterator.next()))) {
            expect(decode.ends || prefillFails).toBe(false);
            return;
          }
        }
        expect(ended).toBe(true);

        // Order: decode items come out as they went in, the same objects, none skipped.
        const errorAt = outputs.findIndex((item) => PrefillError.is(Annotated.err(item)));
        const forwarded = errorAt === -1 ? outputs : outputs.slice(0, errorAt);
        expect(forwarded).toEqual(decode.items.slice(0, forwarded.length));
        forwarded.forEach((item, i) => {
          expect(item).toBe(decode.items[i]);
        });
        // A prefill error is the last item, comes only from a failed prefill, and stops both contexts.
        if (errorAt !== -1) {
          expect(errorAt).toBe(outputs.length - 1);
          expect(prefillFails).toBe(true);
          expect(context.isStopped() && decodeContext.isStopped()).toBe(true);
        } else {
          expect(context.isStopped() || decodeContext.isStopped()).toBe(false);
        }
        // Success is never reported after a prefill failure: unless the consumer left first,
        // such a stream ends with the prefill error or with decode's own failure.
        if (prefillFails && !closedEarly && errorAt === -1) {
          const last = outputs[outputs.length - 1];
          expect(last !== undefined && (Annotated.isError(last) || isFailureData(last))).toBe(true);
        }
        // Anything that ended the stream before decode did closed the decode iterator.
        const decodeFinished = sourceEnded && forwarded.length === decode.items.length;
        if (!decodeFinished) expect(source.closed).toBe(true);
        // The prefill is never cancelled: its outcome is still the one it settled with.
        if (prefillFails) await expect(task.wait()).rejects.toThrow('prefill connection lost');
        else await expect(task.wait()).resolves.toBeUndefined();
      }),
      propertyOptions(300, 20261129),
    );
  });
});
