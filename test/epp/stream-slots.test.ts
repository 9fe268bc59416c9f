import { describe, expect, it } from 'vitest';
import { defaultMaxExtProcStreams, StreamSlots } from '../../src/epp/stream-slots.js';

function recorded() {
  const lines: Array<{ fields: Record<string, unknown>; message: string }> = [];
  const logger = {
    warn: (fields: Record<string, unknown>, message: string) => lines.push({ fields, message }),
  } as never;
  return { lines, logger };
}

describe('the slots of open ext_proc streams', () => {
  it('gives at most the cap at once; a slot given back is taken again', () => {
    const slots = new StreamSlots(2, recorded().logger);
    expect([slots.take(), slots.take(), slots.take()]).toEqual([true, true, false]);
    expect(slots.open).toBe(2);
    slots.give();
    expect(slots.take()).toBe(true);
    expect(slots.take()).toBe(false);
  });

  it('logs a refusal at once, then at most one line per interval, which counts those it stands for', () => {
    let now = 0;
    const { lines, logger } = recorded();
    const slots = new StreamSlots(1, logger, { intervalMs: 10_000, now: () => now });
    slots.take();
    for (let i = 0; i < 5000; i++) {
      slots.take();
      now += 1;
    }
    expect(lines).toHaveLength(1);
    expect(lines[0]?.message).toBe('An ext_proc stream was refused: 1 are open, the limit (--max-ext-proc-streams)');
    now = 10_000;
    slots.take();
    // The refusals counted, told in one line; then the new one, which opens the next interval.
    expect(lines).toHaveLength(3);
    expect(lines[1]?.fields).toMatchObject({ open: 1, repeats: 4999 });
    expect(lines[1]?.message).toMatch(/\(4999 more like this in the last 10 s\)$/);
    expect(lines[2]?.fields).toEqual({ open: 1 });
    slots.take();
    slots.flush();
    expect(lines).toHaveLength(4);
    expect(lines[3]?.fields).toMatchObject({ repeats: 1 });
  });

  it('names the setting in the refusal a stream is told', () => {
    expect(new StreamSlots(7, recorded().logger).refusal).toMatch(/7 ext_proc streams open.*--max-ext-proc-streams/);
  });

  it('is by default twice what admission serves and queues: 4096 with its defaults', () => {
    expect(defaultMaxExtProcStreams({ maxConcurrentRequests: 1024, queueSize: 1024 })).toBe(4096);
    expect(defaultMaxExtProcStreams({ maxConcurrentRequests: 10, queueSize: 0 })).toBe(20);
  });
});
