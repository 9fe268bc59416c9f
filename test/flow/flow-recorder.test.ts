import { describe, expect, it, vi } from 'vitest';
import { type FlowEvent, FlowRecorder } from '../../src/flow/events.js';
import { recordingLogger } from '../support/async.js';

describe('the recorder of one request', () => {
  it('stamps each event with the time since the request began, and finishes once without leg or error unless given', () => {
    vi.useFakeTimers({ toFake: ['performance'] });
    try {
      vi.advanceTimersByTime(1000); // the process has run a while before this request
      const events: FlowEvent[] = [];
      const recorder = new FlowRecorder(
        'req-r',
        (event) => events.push(event),
        () => recordingLogger().logger,
      );
      vi.advanceTimersByTime(40);
      recorder.emit({ type: 'prefillDispatched' });
      expect(events[0]?.elapsedMs).toBe(40);
      expect(recorder.finished).toBe(false);
      recorder.finish('success');
      expect(recorder.finished).toBe(true);
      const [finished] = events.filter((event) => event.type === 'finished');
      expect(finished).not.toHaveProperty('leg');
      expect(finished).not.toHaveProperty('error');
    } finally {
      vi.useRealTimers();
    }
  });

  it('finished names the workers that served the request: those routed, then where a decode retry or a migration moved it', () => {
    const events: FlowEvent[] = [];
    const record = () =>
      new FlowRecorder(
        'req-w',
        (event) => events.push(event),
        () => recordingLogger().logger,
      );
    const finishedOf = () => events.filter((event) => event.type === 'finished').at(-1);
    const error = new Error('x');
    const first = record();
    first.emit({ type: 'routed', strategy: 'sequential', prefillWorker: 'p0', decodeWorker: 'd0' });
    first.emit({ type: 'decodeRetried', attempt: 1, error, delayMs: 0, decodeWorker: 'd1', fromWorker: 'd0' });
    first.finish('success');
    expect(finishedOf()).toMatchObject({ prefillWorker: 'p0', decodeWorker: 'd1' });
    const second = record();
    second.emit({ type: 'routed', strategy: 'sequential', prefillWorker: 'p0', decodeWorker: 'd0' });
    second.emit({
      type: 'migration',
      attempt: 1,
      reason: 'idle',
      outcome: 'refused',
      error,
      generatedTokens: 1,
      fromWorker: 'd0',
    });
    second.finish('error', 'decode', error);
    expect(finishedOf()).toMatchObject({ decodeWorker: 'd0' });
    const third = record();
    third.emit({ type: 'routed', strategy: 'aggregated', decodeWorker: 'd0' });
    third.emit({
      type: 'migration',
      attempt: 1,
      reason: 'idle',
      outcome: 'migrated',
      error,
      generatedTokens: 1,
      fromWorker: 'd0',
      toWorker: 'd2',
    });
    third.finish('success');
    expect(finishedOf()).toMatchObject({ decodeWorker: 'd2' });
    expect(finishedOf()).not.toHaveProperty('prefillWorker');
  });

  it('a listener that throws is logged with its error and the event, and ignored', () => {
    const recorded = recordingLogger();
    const thrown = new Error('listener bug');
    const recorder = new FlowRecorder(
      'req-r',
      () => {
        throw thrown;
      },
      () => recorded.logger,
    );
    recorder.emit({ type: 'prefillDispatched' });
    expect(recorded.records).toEqual([
      {
        level: 'warn',
        fields: { err: thrown, event: 'prefillDispatched' },
        message: 'A flow event listener threw; ignored',
      },
    ]);
  });

  it('a hold released twice counts once: settled waits for every other part', () => {
    const types: string[] = [];
    const recorder = new FlowRecorder(
      'req-r',
      (event) => types.push(event.type),
      () => recordingLogger().logger,
    );
    const first = recorder.hold();
    const second = recorder.hold();
    recorder.finish('success');
    first();
    first();
    expect(types).not.toContain('settled');
    second();
    expect(types.at(-1)).toBe('settled');
  });
});
