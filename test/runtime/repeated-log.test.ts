import { describe, expect, it } from 'vitest';
import { FailureLog, REPEATED_LOG_INTERVAL_MS, RepeatedLog } from '../../src/runtime/repeated-log.js';
import { recordingLogger } from '../support/async.js';

/** A clock the test moves by hand, in ms. */
function clock() {
  let at = 1_000;
  return { now: () => at, advance: (ms: number) => (at += ms) };
}

describe('RepeatedLog: a line that repeats is written once per interval, with a count', () => {
  it('the first line of a kind at once; its repeats within the interval counted; past it, one line with their number, then the next', () => {
    const { logger, records } = recordingLogger();
    const time = clock();
    const log = new RepeatedLog(logger, { now: time.now });
    expect(log.write('warn', 'retry d0', { requestId: 'r0' }, 'Retrying')).toBe(true);
    for (let i = 1; i <= 1_550; i++) {
      time.advance(5);
      expect(log.write('warn', 'retry d0', { requestId: `r${i}` }, 'Retrying')).toBe(false);
    }
    expect(records).toHaveLength(1);
    time.advance(REPEATED_LOG_INTERVAL_MS);
    expect(log.write('warn', 'retry d0', { requestId: 'late' }, 'Retrying')).toBe(true);
    expect(records).toEqual([
      { level: 'warn', fields: { requestId: 'r0' }, message: 'Retrying' },
      // The last one counted stands for them all.
      {
        level: 'warn',
        fields: { requestId: 'r1550', repeats: 1_550 },
        message: 'Retrying (1550 more like this in the last 18 s)',
      },
      { level: 'warn', fields: { requestId: 'late' }, message: 'Retrying' },
    ]);
  });

  it('kinds are apart: another worker is its own first line', () => {
    const { logger, records } = recordingLogger();
    const time = clock();
    const log = new RepeatedLog(logger, { now: time.now });
    log.write('warn', 'retry d0', {}, 'Retrying');
    log.write('warn', 'retry d1', {}, 'Retrying');
    log.write('warn', 'retry d0', {}, 'Retrying');
    expect(records.map((record) => record.message)).toEqual(['Retrying', 'Retrying']);
  });

  it('flush tells what was counted at once, one line per kind, and the interval goes on', () => {
    const { logger, records } = recordingLogger();
    const time = clock();
    const log = new RepeatedLog(logger, { intervalMs: 1_000, now: time.now });
    log.write('error', 'a', { n: 0 }, 'A failed');
    log.write('error', 'a', { n: 1 }, 'A failed');
    log.write('error', 'a', { n: 2 }, 'A failed');
    log.write('error', 'b', { n: 0 }, 'B failed');
    time.advance(300);
    log.flush();
    log.flush();
    expect(records.slice(2)).toEqual([
      { level: 'error', fields: { n: 2, repeats: 2 }, message: 'A failed (2 more like this in the last 1 s)' },
    ]);
    expect(log.write('error', 'a', {}, 'A failed')).toBe(false);
    expect(log.due('a')).toBe(false);
    time.advance(700);
    expect(log.due('a')).toBe(true);
  });

  it('no timer: an idle log holds nothing open, and a logger left out writes nothing', () => {
    const log = new RepeatedLog(undefined);
    expect(log.write('error', 'a', {}, 'A failed')).toBe(true);
    expect(log.write('error', 'a', {}, 'A failed')).toBe(false);
    log.flush();
  });

  it('remembers a bounded number of kinds: the oldest is told and forgotten', () => {
    const { logger, records } = recordingLogger();
    const log = new RepeatedLog(logger, { now: () => 0 });
    log.write('warn', 'kind 0', {}, 'K0');
    log.write('warn', 'kind 0', {}, 'K0');
    for (let i = 1; i <= 256; i++) log.write('warn', `kind ${i}`, {}, `K${i}`);
    expect(records.at(-1)).toEqual({
      level: 'warn',
      fields: { repeats: 1 },
      message: 'K0 (1 more like this in the last 1 s)',
    });
    // Forgotten: its next line is a first one again.
    expect(log.write('warn', 'kind 0', {}, 'K0')).toBe(true);
  });
});

describe('FailureLog: a failure that comes and goes', () => {
  const lines = { failure: 'Redis is unreachable', recovery: 'Redis answers again' };

  it('an outage of 1,000 failed calls: its first failure, one line with the rest, then the recovery', () => {
    const { logger, records } = recordingLogger();
    const time = clock();
    const log = new FailureLog(logger, lines, { now: time.now });
    log.recovered();
    for (let i = 0; i < 1_000; i++) {
      log.failed({ call: i });
      time.advance(5);
    }
    expect(log.failing).toBe(true);
    log.recovered({ replicas: 2 });
    log.recovered();
    expect(log.failing).toBe(false);
    expect(records).toEqual([
      { level: 'error', fields: { call: 0 }, message: 'Redis is unreachable' },
      {
        level: 'error',
        fields: { call: 999, repeats: 999 },
        message: 'Redis is unreachable (999 more like this in the last 5 s)',
      },
      { level: 'info', fields: { replicas: 2 }, message: 'Redis answers again' },
    ]);
  });

  it('a failure that flaps (one call fails, the next works) is a failure and a recovery per interval, not a line per call', () => {
    const { logger, records } = recordingLogger();
    const time = clock();
    const log = new FailureLog(logger, { ...lines, level: 'warn' }, { now: time.now });
    // 30 s of calls every 10 ms, every other one failing.
    for (let i = 0; i < 3_000; i++) {
      if (i % 2 === 0) log.failed({ call: i });
      else log.recovered();
      time.advance(10);
    }
    log.flush();
    // Per 10 s: a failure, a recovery and the count of each (and one count at the close).
    expect(records.length).toBeLessThanOrEqual(3 * 4 + 1);
    // Nothing lost: the lines written and the repeats they tell add up to every failed call.
    const failures = records.filter((record) => record.message?.startsWith('Redis is unreachable'));
    const told = failures.reduce((sum, record) => sum + ((record.fields as { repeats?: number }).repeats ?? 1), 0);
    expect(told).toBe(1_500);
    expect(new Set(failures.map((record) => record.level))).toEqual(new Set(['warn']));
  });

  it('flush at close tells the failures counted since the last line', () => {
    const { logger, records } = recordingLogger();
    const log = new FailureLog(logger, lines, { now: () => 0 });
    log.failed({});
    log.failed({});
    log.flush();
    expect(records.map((record) => record.message)).toEqual([
      'Redis is unreachable',
      'Redis is unreachable (1 more like this in the last 1 s)',
    ]);
  });
});
