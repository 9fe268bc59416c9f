// A workload as a simulated fleet replays it: requests at their arrival times, each with its
// prompt's and answer's lengths and its prompt as a list of block hashes (two requests that
// share a block hash share that block of their prompt, which is what a prefix cache can hold).
// The file format is Mooncake's published one (kvcache-ai/Mooncake, FAST25-release/traces:
// one JSON object a line, `timestamp` in ms, `input_length`, `output_length`, `hash_ids` of
// 512-token blocks), as their FAST'25 traces and AIPerf use it; a line may also say its
// `tenant`, `priority` and its own `slo_ttft_ms` and `slo_itl_ms` (this project's fields).

import { createReadStream } from 'node:fs';
import { createInterface } from 'node:readline';
import { branded, DisaggError } from '../util/disagg-error.js';

/** The tokens of one block of a Mooncake trace's `hash_ids`. */
export const TRACE_BLOCK_TOKENS = 512;

/** One request of a trace. */
export interface TraceRequest {
  /** When it arrives, in ms from the trace's start. */
  readonly arrivalMs: number;
  /** Its prompt's tokens. */
  readonly inputTokens: number;
  /** The tokens it is answered with. */
  readonly outputTokens: number;
  /**
   * Its prompt as blocks of {@link TRACE_BLOCK_TOKENS} tokens, each by a hash: a request
   * sharing the first k hashes with an earlier one shares its first k blocks.
   */
  readonly blocks: readonly number[];
  /**
   * The session it is a turn of, where the workload knows one (a built-in workload's agent
   * sessions; a Mooncake line never has one): what session routing keys on.
   */
  readonly session?: string;
  /** The tenant it belongs to, where the trace says (our field `tenant`): a replay reports each tenant's service apart. */
  readonly tenant?: string;
  /** Its priority, higher first (our field `priority`); none: the default. */
  readonly priority?: number;
  /** Its own time-to-first-token target in ms (our field `slo_ttft_ms`), over the run's. */
  readonly sloTtftMs?: number;
  /** Its own mean inter-token target in ms (our field `slo_itl_ms`), over the run's. */
  readonly sloItlMs?: number;
}

/**
 * A trace file that is not in Mooncake's format: the line and field at fault, and what was
 * expected (`code` `DISAGG_TRACE_FORMAT`).
 */
export class TraceFormatError extends DisaggError {
  static override readonly is = branded<TraceFormatError>('TraceFormatError');
  declare readonly code: 'DISAGG_TRACE_FORMAT';

  constructor(
    message: string,
    /** The 1-based line at fault. */
    readonly line: number,
  ) {
    super('DISAGG_TRACE_FORMAT', message);
  }
}

const isCount = (value: unknown): value is number => Number.isSafeInteger(value) && (value as number) >= 0;

/**
 * One line of a Mooncake trace as a request; blank lines give undefined.
 *
 * @throws {TraceFormatError} naming `where` and the line for anything else: not JSON, a field
 *   missing or of the wrong type, a prompt of more blocks than its length holds, or fewer.
 */
export function parseTraceLine(text: string, line: number, where: string): TraceRequest | undefined {
  if (text.trim() === '') return undefined;
  const fail = (what: string) => new TraceFormatError(`${where}:${line}: ${what}`, line);
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    throw fail('not a JSON object: each line of a Mooncake trace is one');
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw fail('not a JSON object');
  const { timestamp, input_length: input, output_length: output, hash_ids: hashes } = value as Record<string, unknown>;
  if (typeof timestamp !== 'number' || !Number.isFinite(timestamp) || timestamp < 0) {
    throw fail('timestamp must be the arrival in ms, a number of 0 or more');
  }
  if (!isCount(input) || input === 0) throw fail('input_length must be a whole number of tokens, 1 or more');
  if (!isCount(output)) throw fail('output_length must be a whole number of tokens');
  if (!Array.isArray(hashes) || !hashes.every(isCount)) throw fail('hash_ids must be a list of whole numbers');
  const needed = Math.ceil(input / TRACE_BLOCK_TOKENS);
  if (hashes.length !== needed) {
    throw fail(
      `hash_ids holds ${hashes.length} blocks, but ${input} tokens are ${needed} blocks of ${TRACE_BLOCK_TOKENS}`,
    );
  }
  return {
    arrivalMs: timestamp,
    inputTokens: input,
    outputTokens: output,
    blocks: hashes,
    ...serviceOf(value as Record<string, unknown>, fail),
  };
}

/**
 * The fields this project adds to Mooncake's format, each optional: who a request is for and
 * what it must meet (`tenant`, `priority`, `slo_ttft_ms`, `slo_itl_ms`).
 */
function serviceOf(
  line: Record<string, unknown>,
  fail: (what: string) => TraceFormatError,
): Pick<TraceRequest, 'tenant' | 'priority' | 'sloTtftMs' | 'sloItlMs'> {
  const { tenant, priority, slo_ttft_ms: ttft, slo_itl_ms: itl } = line;
  if (tenant !== undefined && (typeof tenant !== 'string' || tenant === '')) throw fail('tenant must be a name');
  if (priority !== undefined && !Number.isSafeInteger(priority)) throw fail('priority must be a whole number');
  const positive = (value: unknown) => typeof value === 'number' && Number.isFinite(value) && value > 0;
  if (ttft !== undefined && !positive(ttft)) throw fail('slo_ttft_ms must be a positive number of ms');
  if (itl !== undefined && !positive(itl)) throw fail('slo_itl_ms must be a positive number of ms');
  return {
    ...(tenant === undefined ? {} : { tenant: tenant as string }),
    ...(priority === undefined ? {} : { priority: priority as number }),
    ...(ttft === undefined ? {} : { sloTtftMs: ttft as number }),
    ...(itl === undefined ? {} : { sloItlMs: itl as number }),
  };
}

/**
 * A whole Mooncake trace from its text, in arrival order (a file's order where arrivals tie).
 *
 * @throws {TraceFormatError} at the first line that is not a request (see {@link parseTraceLine}).
 * @example
 * const requests = parseTrace('{"timestamp": 0, "input_length": 600, "output_length": 20, "hash_ids": [1, 2]}\n');
 * requests[0]?.blocks; // [1, 2]
 */
export function parseTrace(text: string, where = 'trace'): TraceRequest[] {
  const requests: TraceRequest[] = [];
  const lines = text.split('\n');
  for (let i = 0; i < lines.length; i++) {
    const request = parseTraceLine(lines[i] as string, i + 1, where);
    if (request !== undefined) requests.push(request);
  }
  return inArrivalOrder(requests);
}

/**
 * A Mooncake trace file, read a line at a time (the published ones are a few MB; a line is
 * never held twice), in arrival order.
 *
 * @throws {TraceFormatError} at the first line that is not a request.
 * @throws the file system's error for a file that cannot be read.
 */
export async function readTrace(path: string): Promise<TraceRequest[]> {
  const requests: TraceRequest[] = [];
  const lines = createInterface({ input: createReadStream(path, 'utf8'), crlfDelay: Number.POSITIVE_INFINITY });
  let line = 0;
  for await (const text of lines) {
    const request = parseTraceLine(text, ++line, path);
    if (request !== undefined) requests.push(request);
  }
  return inArrivalOrder(requests);
}

function inArrivalOrder(requests: TraceRequest[]): TraceRequest[] {
  // A stable sort: ties keep the file's order.
  return requests.sort((a, b) => a.arrivalMs - b.arrivalMs);
}

/**
 * `requests` arriving `factor` times as fast (2: twice the rate, the same requests in half the
 * time), to sweep load over one trace.
 *
 * @throws {RangeError} for a factor that is not a positive number.
 */
export function scaleRate(requests: readonly TraceRequest[], factor: number): TraceRequest[] {
  if (!(factor > 0) || !Number.isFinite(factor))
    throw new RangeError(`A rate scale is a positive number, got ${factor}`);
  return requests.map((request) => ({ ...request, arrivalMs: request.arrivalMs / factor }));
}

/** What a trace holds, as its replay's summary names it. */
export interface TraceSummary {
  readonly requests: number;
  /** From the first arrival to the last, in seconds. */
  readonly durationS: number;
  /** Requests per second over the duration (0 for one instant). */
  readonly rateRps: number;
  readonly meanInputTokens: number;
  readonly meanOutputTokens: number;
  /**
   * The share of prompt blocks an earlier request of the trace already had at the same place:
   * what a cache that never forgets and sees every request could serve, the bound no routing
   * beats. Measured on Mooncake's published traces: 0.37 of the conversation trace's blocks
   * (12,031 requests over 59 minutes, 12,035 prompt tokens on average), 0.64 of the
   * synthetic one's.
   */
  readonly reusableBlockShare: number;
}

/**
 * The counts of a trace, and the best prefix-cache hit rate any fleet could reach on it: the
 * share of each prompt's leading blocks that an earlier prompt began with too.
 */
export function summarizeTrace(requests: readonly TraceRequest[]): TraceSummary {
  // A prefix tree of block hashes: a block is held only behind the same blocks before it.
  const nodes = new Map<string, number>();
  let blocks = 0;
  let reused = 0;
  let input = 0;
  let output = 0;
  for (const request of requests) {
    input += request.inputTokens;
    output += request.outputTokens;
    let parent = 0;
    for (const hash of request.blocks) {
      blocks++;
      const key = `${parent}:${hash}`;
      let node = nodes.get(key);
      if (node === undefined) {
        node = nodes.size + 1;
        nodes.set(key, node);
      } else reused++;
      parent = node;
    }
  }
  const count = requests.length;
  const first = requests[0]?.arrivalMs ?? 0;
  const last = requests[count - 1]?.arrivalMs ?? 0;
  const durationS = (last - first) / 1000;
  return {
    requests: count,
    durationS,
    rateRps: durationS > 0 ? count / durationS : 0,
    meanInputTokens: count === 0 ? 0 : input / count,
    meanOutputTokens: count === 0 ? 0 : output / count,
    reusableBlockShare: blocks === 0 ? 0 : reused / blocks,
  };
}
