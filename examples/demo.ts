// The main job of disagg, on an embedded default: fake SGLang prefill and decode workers on
// loopback, the disagg proxy in front of them, and the official openai client talking to it.
//
//   npm run demo
//
// 1. A streaming chat completion: tokens as they arrive, and the request's timeline as the
//    proxy saw it (prefill and decode run at once; the last chunk waits for prefill).
// 2. A prefill that fails after the handoff, mid-stream: the client gets one clean SSE error
//    naming the failing leg, never a half-answer passed off as a success.
import OpenAI from 'openai';
import type { FlowEvent } from '../src/index.js';
import { createProxy } from '../src/server/index.js';
import { startFakeWorker } from '../src/testing/index.js';

const quiet = { error() {}, warn() {}, info() {}, debug() {} };
// Prefill takes 60 ms for the prompt, then 600 ms to move the KV; decode streams meanwhile.
const prefill = await startFakeWorker({ role: 'prefill', protocol: 'sglang', tokenIntervalMs: 60, transferMs: 600 });
const decode = await startFakeWorker({ role: 'decode', protocol: 'sglang', tokens: 5, tokenIntervalMs: 40 });
const timeline: FlowEvent[] = [];
const proxy = createProxy({
  connector: 'sglang',
  prefill: [{ url: prefill.url, bootstrapPort: prefill.bootstrapPort }],
  decode: [{ url: decode.url }],
  logger: quiet,
  onEvent: (event) => timeline.push(event),
});
const url = await proxy.listen(0);
const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'not-needed', maxRetries: 0 });
const ms = (value: number) => `+${String(Math.round(value)).padStart(4)} ms`;

console.log(`disagg demo: SGLang prefill ${prefill.url} and decode ${decode.url}, the proxy at ${url}\n`);
console.log('1. A streaming chat completion through the proxy (openai client)');
const started = performance.now();
const { data: stream, response } = await client.chat.completions
  .create({ model: 'fake-model', messages: [{ role: 'user', content: 'Explain disaggregation' }], stream: true })
  .withResponse();
console.log(`   served as: ${response.headers.get('x-disagg-strategy')}`);
for await (const chunk of stream) {
  const choice = chunk.choices[0];
  if (choice?.delta?.content)
    console.log(`   ${ms(performance.now() - started)}  client <- ${JSON.stringify(choice.delta.content)}`);
  if (choice?.finish_reason)
    console.log(`   ${ms(performance.now() - started)}  client <- finish_reason: ${choice.finish_reason}`);
}
console.log("   the proxy's timeline of that request:");
for (const event of timeline.filter((event) => event.type !== 'settled')) {
  const detail =
    event.type === 'terminalReleased'
      ? ` (held ${Math.round(event.heldMs)} ms for prefill)`
      : event.type === 'finished'
        ? `: ${event.outcome}`
        : '';
  console.log(`   ${ms(event.elapsedMs)}  ${event.type}${detail}${event.late ? ' (late)' : ''}`);
}
console.log(
  `   KV handoffs on the prefill worker: ${prefill.ledger.claimed().length} claimed, ${prefill.ledger.outstanding().length} left behind\n`,
);

console.log('2. The prefill worker fails after the handoff, while decode is streaming');
prefill.setFault({ type: 'late-failure', message: 'KV transfer aborted (NIXL timeout)' });
try {
  const failing = await client.chat.completions.create({
    model: 'fake-model',
    messages: [{ role: 'user', content: 'Explain disaggregation' }],
    stream: true,
  });
  for await (const chunk of failing) {
    const text = chunk.choices[0]?.delta?.content;
    if (text) console.log(`   client <- ${JSON.stringify(text)}`);
  }
  console.log('   (no error?)');
} catch (error) {
  const leg = (error as { error?: { leg?: string } }).error?.leg;
  console.log(
    `   client <- SSE error (${error instanceof OpenAI.APIError ? 'OpenAI.APIError' : 'error'}, leg: ${leg}): ${(error as Error).message}`,
  );
}

await proxy.close({ gracePeriodMs: 0, drainDelayMs: 0 }); // no load balancer to tell: close at once
await Promise.all([prefill.close(), decode.close()]);
