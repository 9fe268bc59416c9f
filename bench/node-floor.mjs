// Node's floor for SGLang's handoff, a child of bench/proxy.mjs run beside mini_lb and disagg
// serve: what any Node proxy doing mini_lb's job holds and spends. Each request's JSON is
// parsed, given a bootstrap room, sent to the prefill and the decode worker at once through
// node:http's keep-alive pool, and the decode worker's answer is piped back. No checks, logs,
// metrics or failover, and nothing loaded but Node's own modules. It runs with the image's
// node flags (bench/proxy.mjs passes them) and the V8 flag disagg's command sets, so that
// what lies between it and disagg serve is disagg's own cost.
// Prints one JSON line with its URL, runs until stdin ends.
//   node bench/node-floor.mjs <prefillUrl> <decodeUrl> <bootstrapPort>
import { Agent, createServer, request } from 'node:http';
import { setFlagsFromString } from 'node:v8';

setFlagsFromString('--heap-growing-percent=50');
const [prefillUrl, decodeUrl, bootstrapPort] = process.argv.slice(2);
const agent = new Agent({ keepAlive: true });

function post(base, path, text, answered) {
  const { hostname, port } = new URL(base);
  const call = request(
    { agent, hostname, port, path, method: 'POST', headers: { 'content-type': 'application/json' } },
    answered,
  );
  call.on('error', () => {});
  call.end(text);
}

const server = createServer({ keepAliveTimeout: 72_000, headersTimeout: 73_000 }, (req, res) => {
  const chunks = [];
  req.on('data', (chunk) => chunks.push(chunk));
  req.on('end', () => {
    const body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
    body.bootstrap_host = new URL(prefillUrl).hostname;
    body.bootstrap_port = Number(bootstrapPort);
    body.bootstrap_room = Math.floor(Math.random() * Number.MAX_SAFE_INTEGER);
    const text = JSON.stringify(body);
    post(prefillUrl, req.url, text, (answer) => answer.resume());
    post(decodeUrl, req.url, text, (answer) => {
      res.writeHead(answer.statusCode, { 'content-type': answer.headers['content-type'] ?? 'text/event-stream' });
      answer.pipe(res);
    });
  });
});
await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
console.log(JSON.stringify({ url: `http://127.0.0.1:${server.address().port}` }));

process.stdin.resume();
process.stdin.on('end', () => {
  server.close();
  server.closeAllConnections();
  agent.destroy();
});
