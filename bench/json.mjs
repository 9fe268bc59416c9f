// Exact 64-bit integers in JSON, against JSON.parse and JSON.stringify on the same text
// (which would round them): one process, passes interleaved, the median of per-pass ratios.
// Run by bench/run.mjs after the stream cases; alone: node bench/json.mjs [--scale=1] [--passes=5]
import { parseArgs } from 'node:util';
import { parseJson, stringifyJson } from 'disagg';

const { values: args } = parseArgs({
  options: { scale: { type: 'string', default: '1' }, passes: { type: 'string', default: '5' } },
});
const scale = Number(args.scale);
const median = (values) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)];

/** Bodies as a router meets them: each has an integer above 2^53 - 1, so none takes the plain path. */
function bodies() {
  const ids = Array.from({ length: Math.round(1_000_000 * scale) }, (_, i) => (i * 7919) % 100_000);
  const room = 9223372036854775807n;
  return [
    ['SGLang /generate: 1M token ids and a 64-bit room', { input_ids: ids, bootstrap_room: room, stream: true }],
    [
      'a 7.9 MB prompt and a 64-bit id',
      { model: 'm', prompt: 'word '.repeat(Math.round(1_580_000 * scale)), user_id: room, max_tokens: 16 },
    ],
    ['a streamed chunk with a 64-bit room', { id: 'c', choices: [{ index: 0, text: 'tok ' }], bootstrap_room: room }],
  ];
}

/** Nanoseconds per call of `fn`, over enough calls for 100 ms or so. */
function time(fn) {
  fn();
  let calls = 1;
  for (;;) {
    const start = process.hrtime.bigint();
    for (let i = 0; i < calls; i++) fn();
    const ns = Number(process.hrtime.bigint() - start);
    if (ns > 100e6 || calls >= 1e6) return ns / calls;
    calls *= 4;
  }
}

const rows = bodies().map(([label, value]) => {
  const exact = stringifyJson(value);
  // The same text as JSON.parse and JSON.stringify can handle: the bigint as a plain number.
  const plainValue = JSON.parse(JSON.stringify(value, (_, v) => (typeof v === 'bigint' ? Number(v) : v)));
  const plain = JSON.stringify(plainValue);
  const parse = [];
  const stringify = [];
  for (let pass = 0; pass < Number(args.passes); pass++) {
    parse.push(time(() => parseJson(exact)) / time(() => JSON.parse(plain)));
    stringify.push(time(() => stringifyJson(value)) / time(() => JSON.stringify(plainValue)));
  }
  return { label, bytes: exact.length, parse: median(parse), stringify: median(stringify) };
});

console.log('| JSON with exact 64-bit integers | bytes | parseJson x JSON.parse | stringifyJson x JSON.stringify |');
console.log('|---|---:|---:|---:|');
for (const row of rows) {
  console.log(`| ${row.label} | ${row.bytes} | ${row.parse.toFixed(2)} | ${row.stringify.toFixed(2)} |`);
}
