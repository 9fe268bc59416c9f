// Node's floor, a child of bench/proxy.mjs run beside each peer and disagg serve: what any Node
// proxy doing the peer's job holds and spends. Each request's JSON is parsed and the two
// workers are called through node:http's keep-alive pool, as the peer does it:
// - sglang (mini_lb's job): the body given a bootstrap room, sent to the prefill and the decode
//   worker at once, the decode worker's answer piped back;
// - vllm (the toy proxy's job): the body sent to prefill with one token to make and
//   `do_remote_decode`, its answer read, then sent to decode with the `kv_transfer_params`
//   prefill answered, the decode worker's answer piped back.
// No checks, logs, metrics or failover, and nothing loaded but Node's own modules. It runs with
// the image's node flags (bench/proxy.mjs passes them) and the V8 flag disagg's command sets, so
// that what lies between it and disagg serve is disagg's own cost.
// Prints one JSON line with its URL, runs until stdin ends.
// Each request goes to a prefill and a decode worker chosen at random, as mini_lb chooses.
//   node bench/node-floor.mjs sglang <prefillUrl,...> <decodeUrl,...> <bootstrapPort,...>
//   node bench/node-floor.mjs vllm <prefillUrl,...> <decodeUrl,...>
import { Agent, createServer, request } from 'node:http';
import { setFlagsFromString } from 'node:v8';

setFlagsFromString('--heap-growing-percent=50');
const [protocol, prefillList, decodeList, portList = ''] = process.argv.slice(2);
const prefillUrls = prefillList.split(',');
const decodeUrls = decodeList.split(',');
const bootstrapPorts = portList.split(',');
const any = (list) => Math.floor(Math.random() * list.length);
const agent = new Agent({ keepAlive: true });

function post(base, path, body, answered) {
  const { hostname, port } = new URL(base);
  const call = request(
    { agent, hostname, port, path, method: 'POST', headers: { 'content-type': 'application/json' } },
    answered,
  );
  call.on('error', () => {});
  call.end(JSON.stringify(body));
}

function pipeBack(res) {
  return (answer) => {
    res.writeHead(answer.statusCode, { 'content-type': answer.headers['content-type'] ?? 'text/event-stream' });
    answer.pipe(res);
  };
}

const relays = {
  sglang(path, body, res) {
    const prefill = any(prefillUrls);
    const prefillUrl = prefillUrls[prefill];
    const decodeUrl = decodeUrls[any(decodeUrls)];
    body.bootstrap_host = new URL(prefillUrl).hostname;
    body.bootstrap_port = Number(bootstrapPorts[prefill]);
    body.bootstrap_room = Math.floor(Math.random() * Number.MAX_SAFE_INTEGER);
    post(prefillUrl, path, body, (answer) => answer.resume());
    post(decodeUrl, path, body, pipeBack(res));
  },
  vllm(path, body, res) {
    const prefillUrl = prefillUrls[any(prefillUrls)];
    const decodeUrl = decodeUrls[any(decodeUrls)];
    const { stream_options: _, ...rest } = body;
    const kv_transfer_params = { do_remote_decode: true, do_remote_prefill: false };
    post(prefillUrl, path, { ...rest, kv_transfer_params, stream: false, max_tokens: 1 }, (answer) => {
      const chunks = [];
      answer.on('data', (chunk) => chunks.push(chunk));
      answer.on('end', () => {
        const prefilled = JSON.parse(Buffer.concat(chunks).toString('utf8'));
        post(decodeUrl, path, { ...body, kv_transfer_params: prefilled.kv_transfer_params }, pipeBack(res));
      });
    });
  },
};
const relay = relays[protocol];
if (relay === undefined) throw new Error(`node-floor: the protocol is sglang or vllm, not ${protocol}`);

const server = createServer({ keepAliveTimeout: 72_000, headersTimeout: 73_000 }, (req, res) => {
  const chunks = [];
  req.on('data', (chunk) => chunks.push(chunk));
  req.on('end', () => relay(req.url, JSON.parse(Buffer.concat(chunks).toString('utf8')), res));
});
await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
console.log(JSON.stringify({ url: `http://127.0.0.1:${server.address().port}` }));

process.stdin.resume();
process.stdin.on('end', () => {
  server.close();
  server.closeAllConnections();
  agent.destroy();
});
