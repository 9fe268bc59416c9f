// What a chained Responses turn costs the router: sessions of turns through one disagg proxy
// per store (memory, Redis, PostgreSQL), each turn one short user message, non-streamed, timed
// from the request to the whole answer read (the router stores a response before its end
// leaves, so that time holds the chain's read, its expansion into the input and the write).
// Three kinds of session run in the same pass against the same proxy:
//   stateless  store: false, no previous_response_id (the baseline: the same short input every turn)
//   history    store: false, the client sending the whole conversation itself (what a client
//              without a store sends: the worker's input is as long as a chained turn's)
//   chained    store: true (the default), previous_response_id of the session's last turn
// so that chained - stateless is all that chaining adds, and chained - history the store's part.
import { Agent, request } from 'undici';
import { cpuMs, median, p99 } from './proxy-load.mjs';

export const KINDS = ['stateless', 'history', 'chained'];

const message = (turn) => `Turn ${turn + 1}: which test fails now, and why?`;

/**
 * Runs `sessions` sessions of `turns` turns of one kind against `base`, `concurrency` sessions
 * in flight (a closed loop), and returns the time of each turn by turn number (ms), the proxy's
 * CPU ms per turn, and the failures (counted with their reason, never thrown). Each session has
 * an API key of its own, as separate agents' clients would: its responses are its own owner's.
 */
export async function runSessions(base, kind, { sessions, turns, concurrency, tokens, instructions, pid, tag }) {
  const dispatcher = new Agent({ connections: concurrency * 2, headersTimeout: 60_000, bodyTimeout: 60_000 });
  const times = Array.from({ length: turns }, () => []);
  const failures = [];
  // The longest input a history session sent: what the chain has grown to by its last turn.
  let lastInputBytes = 0;
  let next = 0;
  const session = async (index) => {
    const headers = { 'content-type': 'application/json', authorization: `Bearer bench-${tag}-${kind}-${index}` };
    const history = [];
    let previous;
    for (let turn = 0; turn < turns; turn++) {
      const said = { role: 'user', content: message(turn) };
      const body = { model: 'm', instructions, max_output_tokens: tokens };
      if (kind === 'stateless') Object.assign(body, { input: said.content, store: false });
      else if (kind === 'history') Object.assign(body, { input: [...history, said], store: false });
      else
        Object.assign(body, { input: said.content }, previous === undefined ? {} : { previous_response_id: previous });
      const payload = JSON.stringify(body);
      if (kind === 'history') lastInputBytes = Math.max(lastInputBytes, Buffer.byteLength(JSON.stringify(body.input)));
      const begin = performance.now();
      const answer = await request(`${base}/v1/responses`, { method: 'POST', headers, body: payload, dispatcher });
      const text = await answer.body.text();
      const took = performance.now() - begin;
      if (answer.statusCode !== 200) {
        throw new Error(
          `${kind} turn ${turn + 1}: status ${answer.statusCode}: ${text.replace(/\s+/g, ' ').slice(0, 160)}`,
        );
      }
      const response = JSON.parse(text);
      times[turn].push(took);
      previous = response.id;
      history.push(said, ...response.output);
    }
  };
  const cpuBefore = cpuMs(pid);
  await Promise.all(
    Array.from({ length: Math.min(concurrency, sessions) }, async () => {
      while (next < sessions) {
        await session(next++).catch((error) => failures.push(error?.code ?? error?.message ?? String(error)));
      }
    }),
  );
  const cpuAfter = cpuMs(pid);
  await dispatcher.close();
  const count = times.reduce((sum, list) => sum + list.length, 0);
  return {
    times,
    cpuPerTurn: cpuBefore === undefined || cpuAfter === undefined ? Number.NaN : (cpuAfter - cpuBefore) / count,
    lastInputBytes,
    failed: failures.length,
    failures: [...new Set(failures)],
  };
}

/** The turn numbers a table shows: the first, the second, each power of two, and the last. */
export function shownTurns(turns) {
  const shown = new Set([1, Math.min(2, turns), turns]);
  for (let turn = 4; turn < turns; turn *= 2) shown.add(turn);
  return [...shown].sort((a, b) => a - b);
}

const fmt = (value, digits = 2) => (Number.isFinite(value) ? value.toFixed(digits) : '-');

/** A median over passes, with the lowest and highest beside it. */
function spread(values) {
  const sorted = [...values].sort((a, b) => a - b);
  return `${fmt(median(values))} (${fmt(sorted[0])} to ${fmt(sorted.at(-1))})`;
}

/**
 * The table of the chained turns' figures: per store and turn (and all turns pooled), each
 * kind's p50 / p99 (median over passes), then what chaining adds to a turn against the
 * stateless one and against the client sending its history, each the median over passes of
 * (chained - other) at that percentile, its lowest and highest beside it; then the proxy's CPU
 * per turn of each kind. `passes[i][store][kind]` is one {@link runSessions} result.
 */
export function chainTable(passes, stores, turns) {
  const lines = [
    '| store | turn (responses read) | stateless p50 / p99 | history p50 / p99 | chained p50 / p99 | chained - stateless p50 | chained - stateless p99 | chained - history p50 | chained - history p99 |',
    '|---|---|---:|---:|---:|---:|---:|---:|---:|',
  ];
  const samples = (figures, turn) => (turn === undefined ? figures.times.flat() : figures.times[turn - 1]);
  for (const store of stores) {
    for (const turn of [...shownTurns(turns), undefined]) {
      const at = (kind, percentile) => passes.map((pass) => percentile(samples(pass[store][kind], turn)));
      const both = (kind) => `${fmt(median(at(kind, median)))} / ${fmt(median(at(kind, p99)))}`;
      const added = (other, percentile) => {
        const chained = at('chained', percentile);
        return spread(at(other, percentile).map((value, pass) => chained[pass] - value));
      };
      const label = turn === undefined ? `all ${turns}` : `${turn} (${turn - 1})`;
      const cells = [both('stateless'), both('history'), both('chained')];
      for (const other of ['stateless', 'history']) cells.push(added(other, median), added(other, p99));
      lines.push(`| ${store} | ${label} | ${cells.join(' | ')} |`);
    }
  }
  lines.push('', '| store | proxy CPU ms per turn: stateless | history | chained |', '|---|---:|---:|---:|');
  for (const store of stores) {
    const cpu = (kind) => fmt(median(passes.map((pass) => pass[store][kind].cpuPerTurn)), 3);
    lines.push(`| ${store} | ${cpu('stateless')} | ${cpu('history')} | ${cpu('chained')} |`);
  }
  return lines.join('\n');
}
