import { Annotated, Controller, LLMEngineOutput, PrefillTask, ResponseStream } from 'disagg';

// Stand-ins for your engines: anything that yields Annotated<LLMEngineOutput> items.
async function* prefillWorker() {
  yield Annotated.fromData({ token_ids: [7], disaggregated_params: { bootstrap_room: '42' } });
}
async function* decodeWorker() {
  yield Annotated.fromData({ token_ids: [15496], text: 'Hello' });
  yield Annotated.fromData({ token_ids: [995], text: ' world' });
  yield Annotated.fromData(LLMEngineOutput.length());
}

const client = new Controller('req-1'); // the client's request context

// 1. Start prefill, detached: nothing the client does cancels it. checkOutput turns an error
//    item, a {error} or a cancelled finish reason into a PrefillError.
const prefill = PrefillTask.spawn(async () => {
  for await (const item of prefillWorker()) PrefillTask.checkOutput(item);
});

// 2. Dispatch decode under prefill's watch. The signal aborts if prefill fails first.
const stream = await prefill.forwardDecode(async (signal) => {
  const decodeContext = new Controller(client.id);
  client.linkChild(decodeContext); // a client stop reaches decode, never prefill
  signal.addEventListener('abort', () => decodeContext.stop(), { once: true });
  return new ResponseStream(decodeWorker(), decodeContext);
}, client);

// 3. Relay to the client: tokens flow at once, the terminal only once prefill succeeded,
//    and a prefill failure arrives as one error item.
for await (const item of stream) {
  const error = Annotated.err(item);
  if (error) console.log(`error: ${error.message}`);
  else console.log(item.data?.finish_reason ?? item.data?.text);
}
