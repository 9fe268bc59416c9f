import { describe, expect, it } from 'vitest';
import { sglangBootstrap } from '../../src/engines/registry.js';
import { disaggregate, type Engine } from '../../src/flow/disaggregate.js';
import { Controller } from '../../src/runtime/controller.js';
import { ResponseStream } from '../../src/runtime/response-stream.js';
import { type Item, recordingLogger, ScriptedSource, token } from '../support/async.js';
import { client, eventLog } from '../support/flow.js';
import { collectGarbage } from '../support/heap.js';

const ITEMS = 200_000;
const LIMIT = 8 * 1024 * 1024;

async function* tokens(count: number): AsyncGenerator<Item> {
  const item = token(7);
  for (let i = 0; i < count; i++) yield item;
}

describe('the whole flow keeps memory flat per item', () => {
  it(`${ITEMS.toLocaleString('en')} decode items with prefill pending and every decode budget armed grow the heap by less than 8 MB`, async () => {
    const prefillSource = new ScriptedSource(); // prefill stays pending throughout
    const prefill: Engine = async (_, context) => new ResponseStream(prefillSource, context);
    const decode: Engine = async (_, context) => new ResponseStream(tokens(ITEMS + 1), context);
    const log = eventLog();
    const stream = await disaggregate({
      request: client,
      context: new Controller(),
      prefill,
      decode,
      connector: sglangBootstrap,
      prefillWorker: { bootstrapHost: 'h', bootstrapPort: 1 },
      // A timer and a turn per read, and a pending request deadline all along.
      deadlines: { totalMs: 600_000, handoffMs: 600_000, decodeFirstTokenMs: 60_000, idleMs: 60_000 },
      onEvent: log.onEvent,
      logger: recordingLogger().logger,
    });
    const iterator = stream[Symbol.asyncIterator]();
    await iterator.next();
    collectGarbage();
    const before = process.memoryUsage().heapUsed;
    for (let i = 1; i < ITEMS; i++) await iterator.next();
    collectGarbage();
    expect(process.memoryUsage().heapUsed - before).toBeLessThan(LIMIT);
    expect(log.events.length).toBeLessThan(20); // events per request, never per item
    await iterator.return?.();
    prefillSource.end();
  });
});
