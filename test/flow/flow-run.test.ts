import { describe, expect, it } from 'vitest';
import {
  nextPrefill,
  type PrefillEvent,
  type PrefillPhase,
  prefillFailed,
  prefillRunning,
} from '../../src/flow/flow-run.js';
import type { PrefillTask } from '../../src/handoff/prefill-task.js';

/** A background task as the phase reads it: only its state. */
const task = (state: PrefillTask['state']) => ({ state }) as PrefillTask;

describe("the prefill leg's phases: an end is final", () => {
  const pending = task('pending');
  const idle: PrefillPhase = { kind: 'idle' };
  const reading: PrefillPhase = { kind: 'reading' };
  const background: PrefillPhase = { kind: 'background', task: pending };
  const done: PrefillPhase = { kind: 'done' };
  const failed: PrefillPhase = { kind: 'failed' };
  const dispatched: PrefillEvent = { kind: 'dispatched' };
  const handed: PrefillEvent = { kind: 'handed', task: pending };
  const succeeded: PrefillEvent = { kind: 'ended', failed: false };
  const failing: PrefillEvent = { kind: 'ended', failed: true };
  it.each([
    [idle, dispatched, reading],
    [reading, dispatched, reading], // a second dispatch (a rendezvous) reads on
    [background, dispatched, background],
    [idle, handed, background],
    [reading, handed, background],
    [reading, succeeded, done],
    [reading, failing, failed],
    [background, succeeded, done],
    [background, failing, failed],
    [done, dispatched, done],
    [done, handed, done],
    [done, failing, done], // a task's outcome reported late
    [failed, succeeded, failed],
  ] as const)('%o, then %o: %o', (phase, event, next) => {
    expect(nextPrefill(phase, event)).toStrictEqual(next);
  });

  it.each([
    [idle, false, false],
    [reading, true, false],
    [{ kind: 'background', task: task('pending') }, true, false],
    [{ kind: 'background', task: task('succeeded') }, false, false],
    [{ kind: 'background', task: task('failed') }, false, true], // a background failure counts at once
    [done, false, false],
    [failed, false, true],
  ] as const)('%o: running %s, failed %s', (phase, running, hasFailed) => {
    expect([prefillRunning(phase), prefillFailed(phase)]).toEqual([running, hasFailed]);
  });
});
