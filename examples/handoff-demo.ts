// The main job of disagg, on simulated in-process engines: a prefill and a decode running at
// once (as with SGLang's bootstrap handoff), guarded by PrefillTask.forwardDecode.
//
//   npm run demo:handoff
//
// Each scenario prints a timeline: what the engines do, and what the client receives.
import { setTimeout as sleep } from 'node:timers/promises';
import { Annotated, Controller, LLMEngineOutput, PrefillTask, ResponseStream } from '../src/index.js';

type Item = Annotated<LLMEngineOutput>;

const WORDS = ['Disaggregated', ' serving', ' splits', ' prefill', ' from', ' decode', '.'];
let started = 0;
let terminalSentAt: number | undefined;

function log(actor: string, text: string): void {
  const at = `+${String(Math.round(performance.now() - started)).padStart(5)} ms`;
  console.log(`  ${at}  ${actor.padEnd(8)} ${text}`);
}

/** A prefill worker: computes the prompt's KV for `ms`, then succeeds or fails. */
async function prefillEngine(ms: number, failure?: string): Promise<void> {
  log('prefill', `started (${ms} ms of prompt work)`);
  await sleep(ms);
  if (failure !== undefined) {
    log('prefill', `FAILED: ${failure}`);
    throw new Error(failure);
  }
  log('prefill', 'succeeded: KV handed to the decode worker');
}

/** A decode worker: one token every `intervalMs`, then a `length` terminal. Stops when told. */
function decodeEngine(intervalMs: number, context: Controller): Promise<ResponseStream<Item>> {
  async function* tokens(): AsyncGenerator<Item> {
    try {
      for (const [i, text] of WORDS.entries()) {
        await sleep(intervalMs, undefined, { signal: context.signal });
        yield Annotated.fromData({ token_ids: [1000 + i], text });
      }
      await sleep(intervalMs, undefined, { signal: context.signal });
      terminalSentAt = performance.now();
      log('decode', 'sends its terminal (finish_reason: length); held until prefill settles');
      yield Annotated.fromData(LLMEngineOutput.length());
    } catch (error) {
      if ((error as Error).name !== 'AbortError') throw error;
      log('decode', 'stopped by its context');
    }
  }
  log('decode', 'dispatched');
  return Promise.resolve(new ResponseStream(tokens(), context));
}

async function scenario(title: string, prefillMs: number, decodeIntervalMs: number, failure?: string) {
  console.log(`\n${title}`);
  started = performance.now();
  terminalSentAt = undefined;
  const client = new Controller('demo-request');
  const decodeContext = new Controller('demo-request');
  client.linkChild(decodeContext);
  // Prefill runs detached, on its own context: nothing the client does cancels it.
  const task = PrefillTask.spawn(() => prefillEngine(prefillMs, failure), {
    logger: { error() {}, warn() {}, info() {}, debug() {} },
  });
  const stream = await task.forwardDecode(decodeEngine(decodeIntervalMs, decodeContext), client);
  let text = '';
  for await (const item of stream) {
    const error = Annotated.err(item);
    if (error !== undefined) {
      log('client', `<- error: ${error.message}`);
    } else if (item.data?.finish_reason) {
      const held = Math.round(performance.now() - (terminalSentAt ?? performance.now()));
      log('client', `<- finish_reason: ${item.data.finish_reason} after a ${held} ms hold  (text: "${text}")`);
    } else {
      text += item.data?.text ?? '';
      log('client', `<- token ${JSON.stringify(item.data?.text)}`);
    }
  }
  log('client', `stream ended; request context stopped: ${client.isStopped() ? 'yes' : 'no'}`);
  await sleep(5); // lets the decode worker report how it stopped before the next scenario
}

await scenario('1. Tokens flow while prefill is still running; the terminal waits for prefill', 700, 60);
await scenario('2. A late prefill failure replaces the decode success', 700, 60, 'KV transfer timed out (NIXL)');
await scenario('3. A prefill failure mid-stream stops decode at once', 250, 60, 'prefill worker 2 lost');
console.log('\nSee docs/library.md (The rules) for the rules behind each line.');
