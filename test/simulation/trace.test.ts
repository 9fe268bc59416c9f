import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  parseTrace,
  parseTraceLine,
  readTrace,
  scaleRate,
  summarizeTrace,
  TRACE_BLOCK_TOKENS,
  TraceFormatError,
} from '../../src/simulation/trace.js';

// Four requests in Mooncake's published format (one JSON object a line, 512-token blocks),
// out of arrival order on purpose: two share a prompt's first two blocks, one its first only
// behind another block (no hit), one repeats the first block alone.
const TRACE = [
  '{"timestamp": 0, "input_length": 1200, "output_length": 40, "hash_ids": [7, 8, 9]}',
  '{"timestamp": 0, "input_length": 1100, "output_length": 12, "hash_ids": [7, 8, 31]}',
  '{"timestamp": 2500, "input_length": 300, "output_length": 5, "hash_ids": [7]}',
  '',
  '{"timestamp": 1000, "input_length": 1536, "output_length": 103, "hash_ids": [50, 8, 9]}',
].join('\n');

const failure = (text: string) => {
  try {
    parseTrace(text, 'mine.jsonl');
  } catch (error) {
    return error as TraceFormatError;
  }
  throw new Error('parsed');
};

describe("a Mooncake trace (kvcache-ai/Mooncake's FAST'25 format)", () => {
  it('reads each line as a request, in arrival order, arrivals that tie in the file’s order', () => {
    const requests = parseTrace(TRACE);
    expect(requests.map((request) => [request.arrivalMs, request.outputTokens])).toEqual([
      [0, 40],
      [0, 12],
      [1000, 103],
      [2500, 5],
    ]);
    expect(requests[2]).toEqual({ arrivalMs: 1000, inputTokens: 1536, outputTokens: 103, blocks: [50, 8, 9] });
    expect(TRACE_BLOCK_TOKENS).toBe(512);
  });

  it('counts as reusable only the blocks behind the same blocks as an earlier prompt: the best hit rate any fleet could reach', () => {
    const summary = summarizeTrace(parseTrace(TRACE));
    // 7, 8 of the second request; 7 of the last. [50, 8, 9] shares no prefix.
    expect(summary.reusableBlockShare).toBeCloseTo(3 / 10, 12);
    expect(summary).toMatchObject({ requests: 4, durationS: 2.5, rateRps: 1.6 });
    expect(summary.meanInputTokens).toBe((1200 + 1100 + 1536 + 300) / 4);
    expect(summary.meanOutputTokens).toBe(40);
  });

  it('scales its rate: twice the rate is the same requests in half the time', () => {
    const faster = scaleRate(parseTrace(TRACE), 2);
    expect(faster.map((request) => request.arrivalMs)).toEqual([0, 0, 500, 1250]);
    expect(summarizeTrace(faster).rateRps).toBe(3.2);
    for (const bad of [0, -1, Number.NaN, Number.POSITIVE_INFINITY]) {
      expect(() => scaleRate([], bad)).toThrow(RangeError);
    }
  });

  it('refuses a line not in the format, naming the file, the line and what was expected', () => {
    const cases: Array<[string, RegExp]> = [
      ['not json', /mine\.jsonl:2: not a JSON object/],
      ['[1, 2]', /mine\.jsonl:2: not a JSON object/],
      ['{"timestamp": -5, "input_length": 10, "output_length": 1, "hash_ids": [1]}', /timestamp must be/],
      ['{"timestamp": 0, "input_length": 0, "output_length": 1, "hash_ids": []}', /input_length must be/],
      ['{"timestamp": 0, "input_length": 10, "output_length": 1.5, "hash_ids": [1]}', /output_length must be/],
      ['{"timestamp": 0, "input_length": 10, "output_length": 1}', /hash_ids must be a list/],
      [
        '{"timestamp": 0, "input_length": 600, "output_length": 1, "hash_ids": [1]}',
        /holds 1 blocks, but 600 tokens are 2 blocks of 512/,
      ],
    ];
    for (const [line, words] of cases) {
      const error = failure(`${TRACE.split('\n')[0]}\n${line}`);
      expect(TraceFormatError.is(error)).toBe(true);
      expect(error.code).toBe('DISAGG_TRACE_FORMAT');
      expect(error.line).toBe(2);
      expect(error.message).toMatch(words);
    }
  });

  it('reads a file a line at a time as the text reads, CRLF line ends too, its errors naming the file', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'disagg-trace-'));
    const path = join(dir, 'trace.jsonl');
    writeFileSync(path, TRACE.replaceAll('\n', '\r\n'));
    expect(await readTrace(path)).toEqual(parseTrace(TRACE));
    const broken = join(dir, 'broken.jsonl');
    writeFileSync(broken, `${TRACE}\n{"timestamp": 0}\n`);
    await expect(readTrace(broken)).rejects.toThrow(`${broken}:6: input_length must be`);
  });
});

describe("a trace line's service fields (this project's, beside Mooncake's)", () => {
  const base = { timestamp: 0, input_length: 600, output_length: 20, hash_ids: [1, 2] };
  it('reads who a request is for and what it must meet, each where given', () => {
    const line = JSON.stringify({ ...base, tenant: 'team-a', priority: 2, slo_ttft_ms: 500, slo_itl_ms: 40 });
    expect(parseTraceLine(line, 1, 't.jsonl')).toEqual({
      arrivalMs: 0,
      inputTokens: 600,
      outputTokens: 20,
      blocks: [1, 2],
      tenant: 'team-a',
      priority: 2,
      sloTtftMs: 500,
      sloItlMs: 40,
    });
    expect(parseTraceLine(JSON.stringify(base), 1, 't.jsonl')).not.toHaveProperty('tenant');
  });

  it.each([
    [{ tenant: '' }, 'tenant must be a name'],
    [{ priority: 1.5 }, 'priority must be a whole number'],
    [{ slo_ttft_ms: 0 }, 'slo_ttft_ms must be a positive number of ms'],
    [{ slo_itl_ms: 'fast' }, 'slo_itl_ms must be a positive number of ms'],
  ])('refuses %j, naming the file, the line and the field', (extra, message) => {
    expect(() => parseTraceLine(JSON.stringify({ ...base, ...extra }), 3, 't.jsonl')).toThrow(`t.jsonl:3: ${message}`);
  });
});
