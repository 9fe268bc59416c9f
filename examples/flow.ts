import {
  Annotated,
  Controller,
  disaggregate,
  type Engine,
  LLMEngineOutput,
  ResponseStream,
  vllmNixl,
  WorkerPool,
} from 'disagg';

// Stand-in engines: a vLLM prefill worker that hands off its KV, a decode worker that streams.
const prefill: Engine<{ url: string }> = async (body, context, worker) => {
  console.log(`prefill on ${worker?.url}: max_tokens ${body.max_tokens}`);
  async function* answer() {
    const kv_transfer_params = { remote_engine_id: 'e1', remote_block_ids: [1, 2] };
    yield Annotated.fromData({
      token_ids: [9],
      finish_reason: 'length' as const,
      disaggregated_params: kv_transfer_params,
    });
  }
  return new ResponseStream(answer(), context);
};
const decode: Engine<{ url: string }> = async (body, context, worker) => {
  console.log(
    `decode on ${worker?.url}: max_tokens ${body.max_tokens}, KV from ${JSON.stringify(body.kv_transfer_params)}`,
  );
  async function* answer() {
    yield Annotated.fromData({ token_ids: [15496], text: 'Hello' });
    yield Annotated.fromData({ ...LLMEngineOutput.length(), text: '!' });
  }
  return new ResponseStream(answer(), context);
};

let outcome = '';
const stream = await disaggregate({
  request: { model: 'm', prompt: 'Say hello', max_tokens: 16, stream: true },
  context: new Controller('req-1'), // the client's: a client stop reaches decode, never prefill
  connector: vllmNixl, // sequential: prefill with a one-token budget, then decode with its KV
  prefill,
  decode,
  prefillWorkers: new WorkerPool([{ url: 'http://prefill-0:8100' }]),
  decodeWorkers: new WorkerPool([{ url: 'http://decode-0:8200' }], { selection: 'least-in-flight' }),
  deadlines: { prefillFirstOutputMs: 30_000, idleMs: 10_000 }, // each overrun: a DeadlineError
  onEvent: (event) => {
    if (event.type === 'finished') outcome = event.outcome; // exactly one per request
  },
});
for await (const item of stream) console.log(Annotated.err(item)?.message ?? item.data?.text);
console.log(`outcome: ${outcome}`);
