// What the endpoint picker costs per request, against the proxy for the same request: `disagg
// epp` (pinned to the first CPU, the image's node flags) answering a scripted Envoy in
// FULL_DUPLEX_STREAMED mode (request headers and body, the decision, the body streamed back;
// the answer's headers and its SSE events echoed one message each, as Envoy sends them), and
// `disagg serve` (the same CPU, flags and fake vLLM workers) relaying the same chat request
// streamed with as many events. Alternating passes of a closed loop; the picker's figures are
// ratios to the proxy's in the same pass (the median over passes, lowest and highest beside it).
//   npm run bench:epp -- [--passes 3] [--requests 2000] [--concurrency 16] [--tokens 32]
import { readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { child, cpuMs, cpuPlan, imageNode, load, median, onProxyCpu, p99, pinSelf } from './proxy-load.mjs';

const { values: args } = parseArgs({
  options: {
    passes: { type: 'string', default: '3' },
    requests: { type: 'string', default: '2000' },
    warmup: { type: 'string', default: '500' },
    concurrency: { type: 'string', default: '16' },
    tokens: { type: 'string', default: '32' },
    node: { type: 'string', default: process.execPath },
    'no-pin': { type: 'boolean', default: false },
  },
});
const root = fileURLToPath(new URL('..', import.meta.url));
const tokens = Number(args.tokens);
const plan = cpuPlan(!args['no-pin']);
pinSelf(plan);
const closers = [];

const body = {
  model: 'm',
  messages: [
    {
      role: 'system',
      content: 'You are a coding agent. Read the repository before you change it; run the tests after.',
    },
    { role: 'user', content: 'Why does the build fail on Node 20?' },
  ],
  max_tokens: tokens,
  stream: true,
};
const bodyBytes = Buffer.from(JSON.stringify(body));
/** One SSE event of a chat stream, as the decode pod sends it back through Envoy. */
const event = Buffer.from(
  `data: ${JSON.stringify({ id: 'chatcmpl-1', object: 'chat.completion.chunk', created: 1, model: 'm', choices: [{ index: 0, delta: { content: 'tok ' }, finish_reason: null }] })}\n\n`,
);
const last = Buffer.from(
  `data: ${JSON.stringify({ id: 'chatcmpl-1', object: 'chat.completion.chunk', created: 1, model: 'm', choices: [], usage: { prompt_tokens: 20, completion_tokens: tokens } })}\n\ndata: [DONE]\n\n`,
);

const descriptor = JSON.parse(readFileSync(join(root, 'src/epp/ext-proc-descriptor.json'), 'utf8'));
const definition = protoLoader.fromJSON(descriptor, {
  keepCase: true,
  longs: String,
  enums: String,
  defaults: false,
  oneofs: true,
});
const ExternalProcessor = grpc.loadPackageDefinition(definition).envoy.service.ext_proc.v3.ExternalProcessor;
const header = (key, value) => ({ key, raw_value: Buffer.from(value) });
const requestHeaders = {
  request_headers: {
    headers: {
      headers: [
        header(':method', 'POST'),
        header(':path', '/v1/chat/completions'),
        header(':authority', 'gateway'),
        header('content-type', 'application/json'),
      ],
    },
  },
};

/** One request through the picker as Envoy runs it; resolves with the time to its decision, in ms. */
function oneStream(client) {
  return new Promise((resolve, reject) => {
    const call = client.Process();
    const started = performance.now();
    let decidedMs;
    let destination;
    let echoed = 0;
    const expected = tokens + 1;
    call.on('data', (answer) => {
      if (answer.immediate_response !== undefined)
        return reject(new Error(`refused: ${answer.immediate_response.status.code}`));
      if (answer.request_headers !== undefined) {
        decidedMs = performance.now() - started;
        destination = answer.request_headers.response.header_mutation.set_headers[0].header.raw_value.toString();
        return;
      }
      const streamed = answer.request_body?.response.body_mutation.streamed_response;
      if (streamed?.end_of_stream) {
        // The gateway sends it on; the pod answers: its headers, then its events one by one.
        call.write({
          response_headers: { headers: { headers: [header(':status', '200')] } },
          metadata_context: {
            filter_metadata: {
              'envoy.lb': { fields: { 'x-gateway-destination-endpoint-served': { stringValue: destination } } },
            },
          },
        });
        for (let i = 0; i < tokens; i++) call.write({ response_body: { body: event, end_of_stream: false } });
        call.write({ response_body: { body: last, end_of_stream: true } });
        return;
      }
      if (answer.response_body !== undefined && ++echoed === expected) call.end();
    });
    call.on('error', reject);
    call.on('end', () => (echoed === expected ? resolve(decidedMs) : reject(new Error('the stream ended early'))));
    call.write(requestHeaders);
    call.write({ request_body: { body: bodyBytes, end_of_stream: true } });
  });
}

/** `requests` streams through the picker, `concurrency` at a time: its CPU per request and the decision's latency. */
async function pickerRun(client, pid, requests, concurrency) {
  const before = cpuMs(pid);
  const decisions = [];
  let next = 0;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < requests) {
        next++;
        decisions.push(await oneStream(client));
      }
    }),
  );
  const wallMs = performance.now() - started;
  return {
    cpuPerRequest: (cpuMs(pid) - before) / requests,
    decisionP50: median(decisions),
    decisionP99: p99(decisions),
    perSecond: (requests * 1000) / wallMs,
  };
}

try {
  const workers = await child(process.execPath, ['bench/proxy-fixtures.mjs', 'workers', 'vllm', args.tokens, '0'], {
    cwd: root,
  });
  closers.push(() => workers.proc.stdin.end());
  const config = join(tmpdir(), `disagg-bench-epp-${process.pid}.yaml`);
  writeFileSync(
    config,
    JSON.stringify({ connector: 'vllm', prefill: [workers.info.prefill], decode: [workers.info.decode] }),
  );
  const { flags, options } = imageNode();
  const [proxyCommand, proxyArgv] = onProxyCpu(plan, args.node, [
    ...flags,
    'dist/cli.js',
    'serve',
    '--config',
    config,
    '--port',
    '0',
  ]);
  const proxy = await child(proxyCommand, proxyArgv, {
    cwd: root,
    env: { NODE_OPTIONS: options },
    ready: (line) => line.includes('disagg serve listening'),
  });
  closers.push(() => proxy.proc.kill('SIGTERM'));
  const [eppCommand, eppArgv] = onProxyCpu(plan, args.node, [
    ...flags,
    'dist/cli.js',
    'epp',
    '--config',
    config,
    '--host',
    '127.0.0.1',
    '--port',
    '0',
    '--health-port',
    '0',
    '--metrics-port',
    '0',
  ]);
  const epp = await child(eppCommand, eppArgv, {
    cwd: root,
    env: { NODE_OPTIONS: options },
    ready: (line) => line.includes('disagg epp listening'),
  });
  closers.push(() => epp.proc.kill('SIGTERM'));
  const client = new ExternalProcessor(epp.info.extProc, grpc.credentials.createInsecure());
  closers.push(() => client.close());
  const concurrency = Number(args.concurrency);
  const proxyRun = (requests) =>
    load(`${proxy.info.url}/v1/chat/completions`, body, {
      requests,
      concurrency,
      tokens,
      pid: proxy.proc.pid,
      metricsUrl: `${proxy.info.url}/metrics`,
    });
  await proxyRun(Number(args.warmup));
  await pickerRun(client, epp.proc.pid, Number(args.warmup), concurrency);
  const passes = [];
  for (let pass = 0; pass < Number(args.passes); pass++) {
    const figures = {};
    const order = pass % 2 === 0 ? ['proxy', 'epp'] : ['epp', 'proxy'];
    for (const name of order) {
      figures[name] =
        name === 'proxy'
          ? await proxyRun(Number(args.requests))
          : await pickerRun(client, epp.proc.pid, Number(args.requests), concurrency);
    }
    if (figures.proxy.failed > 0) throw new Error(`proxy requests failed: ${figures.proxy.failures.join('; ')}`);
    passes.push(figures);
  }
  const fmt = (value, digits = 2) => (Number.isFinite(value) ? value.toFixed(digits) : '-');
  const mid = (name, key) => median(passes.map((figures) => figures[name][key]));
  const ratios = passes.map((figures) => figures.epp.cpuPerRequest / figures.proxy.cpuPerRequest).sort((a, b) => a - b);
  console.log(
    `disagg epp against disagg serve for the same chat stream (${tokens} events, ${concurrency} in flight, ${args.requests} requests, ${args.passes} passes${plan === undefined ? ', unpinned' : ', each pinned to CPU 0'}).\n`,
  );
  console.log('| process | CPU ms per request | decision ms (p50 / p99) | requests per second |');
  console.log('|---|---:|---:|---:|');
  console.log(`| disagg serve (the whole relay) | ${fmt(mid('proxy', 'cpuPerRequest'), 3)} | - | - |`);
  console.log(
    `| disagg epp (the decision and the echo) | ${fmt(mid('epp', 'cpuPerRequest'), 3)} | ${fmt(mid('epp', 'decisionP50'))} / ${fmt(mid('epp', 'decisionP99'))} | ${fmt(mid('epp', 'perSecond'), 0)} |`,
  );
  console.log(`\npicker CPU per request / proxy's: ${fmt(median(ratios))} x (${fmt(ratios[0])}-${fmt(ratios.at(-1))})`);
} finally {
  for (const close of closers) close();
}
