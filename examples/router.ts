// A disaggregating router on node:http that routes on what the engines hold (their KV cache
// events) and moves a stream to another decode worker when its own dies, from the library's
// pieces. PREFILL and DECODE are comma-separated worker URLs; PREFILL_KV_EVENTS the prefill
// workers' KV event publishers in the same order (vLLM's `--kv-events-config` endpoint,
// tcp://host:5557); TOKENIZER a Hugging Face tokenizer directory (text and chat prompts are
// matched to blocks by their token ids; token-id prompts need none); CONNECTOR is vllm (the
// default) or sglang (then BOOTSTRAP_PORT, 8998 by default); MIGRATION_LIMIT how often one
// stream may move (2); PORT is where it listens (8000).
import { createServer } from 'node:http';
import {
  disaggregate,
  httpEngine,
  precisePrefix,
  sglangBootstrap,
  TokenizerPool,
  vllmNixl,
  WorkerPool,
  workerRedactor,
} from 'disagg';
import { answerNode, defaultRetries, errorToResponse, KvFollower, type Route, watchHealth } from 'disagg/server';

const urls = (name: string) => (process.env[name] ?? '').split(',').filter((url) => url !== '');
const bootstrapPort = Number(process.env.BOOTSTRAP_PORT ?? 8998);
const kvEvents = urls('PREFILL_KV_EVENTS');
// One subscriber per worker that publishes, feeding one index of who holds which blocks.
const kv = new KvFollower();
const prefillWorkers = new WorkerPool(
  urls('PREFILL').map((url, i) => ({ url, bootstrapPort, kvEvents: kvEvents[i] })),
  { selection: precisePrefix(kv) }, // the most of the prompt's blocks held, against load
);
const decodeWorkers = new WorkerPool(
  urls('DECODE').map((url) => ({ url })),
  { selection: 'least-in-flight' },
);
await kv.start([prefillWorkers]);
const tokenizer = process.env.TOKENIZER ? await TokenizerPool.start({ dir: process.env.TOKENIZER }) : undefined;
const health = watchHealth({ prefill: prefillWorkers, decode: decodeWorkers });
const redact = workerRedactor([...prefillWorkers.workers, ...decodeWorkers.workers]);
const engine = httpEngine();
const flow = {
  connector: process.env.CONNECTOR === 'sglang' ? sglangBootstrap : vllmNixl,
  prefill: engine,
  decode: engine,
  prefillWorkers,
  decodeWorkers,
  onEvent: health.onEvent,
  ...defaultRetries(),
  // A stream whose decode worker dies after its first token goes on on another one, as one stream.
  migration: { limit: Number(process.env.MIGRATION_LIMIT ?? 2) },
};
const routes: Record<string, Extract<Route, 'completions' | 'chat'>> = {
  '/v1/completions': 'completions',
  '/v1/chat/completions': 'chat',
};

const server = createServer((req, res) => {
  const route = routes[req.url ?? ''];
  if (req.method !== 'POST' || route === undefined) return void res.writeHead(404).end();
  void answerNode(
    req,
    res,
    route,
    async (body, context) =>
      disaggregate({ ...flow, request: body, context, promptTokenIds: await tokenizer?.tokenize(body, route) }),
    { answer: (error) => errorToResponse(error, { redact }) },
  );
});
server.listen(Number(process.env.PORT ?? 8000), '127.0.0.1', () => {
  const address = server.address();
  console.log(`router listening on http://127.0.0.1:${typeof address === 'object' ? address?.port : address}`);
});
process.on('SIGTERM', () => {
  health.stop();
  void kv.close();
  void tokenizer?.close();
  server.close();
});
