import { describe, expect, it } from 'vitest';
import { Controller } from '../../src/runtime/controller.js';
import { isPending } from '../support/async.js';

describe('Controller', () => {
  it('has the given id, or a random UUID', () => {
    expect(new Controller('req-1').id).toBe('req-1');
    expect(new Controller().id).toMatch(/^[0-9a-f-]{36}$/);
    expect(new Controller().id).not.toBe(new Controller().id);
  });

  it('refuses an id that is not a non-empty string', () => {
    expect(() => new Controller('')).toThrow('Controller id must be a non-empty string, got an empty string');
    expect(() => new Controller(7 as unknown as string)).toThrow('got number');
  });

  it('starts live', async () => {
    const context = new Controller();
    expect(context.isStopped()).toBe(false);
    expect(context.isKilled()).toBe(false);
    expect(context.signal.aborted).toBe(false);
    expect(await isPending(context.stopped())).toBe(true);
    expect(await isPending(context.killed())).toBe(true);
  });

  it('stopGenerating stops, resolves stopped(), and aborts the signal with an AbortError', async () => {
    const context = new Controller('req-2');
    const { signal } = context;
    const stopped = context.stopped();
    context.stopGenerating();
    expect(context.isStopped()).toBe(true);
    expect(context.isKilled()).toBe(false);
    await expect(stopped).resolves.toBeUndefined();
    expect(await isPending(context.killed())).toBe(true);
    expect(signal.aborted).toBe(true);
    expect(signal.reason).toBeInstanceOf(DOMException);
    expect((signal.reason as DOMException).name).toBe('AbortError');
    expect((signal.reason as DOMException).message).toBe('Request req-2 was stopped');
  });

  it('stop() is an alias of stopGenerating()', () => {
    const context = new Controller();
    context.stop();
    expect(context.isStopped()).toBe(true);
  });

  it('kill implies stopped and resolves both promises', async () => {
    const context = new Controller('req-3');
    context.kill();
    expect(context.isStopped()).toBe(true);
    expect(context.isKilled()).toBe(true);
    await expect(context.stopped()).resolves.toBeUndefined();
    await expect(context.killed()).resolves.toBeUndefined();
    expect((context.signal.reason as DOMException).message).toBe('Request req-3 was killed');
  });

  it('a stop can be escalated to a kill, never undone', async () => {
    const context = new Controller();
    const killed = context.killed();
    context.stop();
    context.kill();
    await expect(killed).resolves.toBeUndefined();
    context.stop();
    expect(context.isKilled()).toBe(true);
    expect(context.isStopped()).toBe(true);
  });

  it('aborts the signal once, however often it is stopped', () => {
    const context = new Controller();
    let aborts = 0;
    context.signal.addEventListener('abort', () => {
      aborts += 1;
    });
    context.stop();
    context.stop();
    context.kill();
    expect(aborts).toBe(1);
  });

  it('a signal asked for after the stop is already aborted', () => {
    const context = new Controller();
    context.stop();
    expect(context.signal.aborted).toBe(true);
  });

  it('stopping a parent stops its children first', () => {
    const parent = new Controller('parent');
    const child = new Controller('child');
    parent.linkChild(child);
    const order: string[] = [];
    child.signal.addEventListener('abort', () => order.push(`child (parent stopped: ${parent.isStopped()})`));
    parent.signal.addEventListener('abort', () => order.push('parent'));
    parent.stopGenerating();
    expect(order).toEqual(['child (parent stopped: false)', 'parent']);
    expect(child.isKilled()).toBe(false);
  });

  it('killing a parent kills its children', () => {
    const parent = new Controller();
    const child = new Controller();
    const grandchild = new Controller();
    parent.linkChild(child);
    child.linkChild(grandchild);
    parent.kill();
    expect(child.isKilled()).toBe(true);
    expect(grandchild.isKilled()).toBe(true);
  });

  it('a child never stops its parent', () => {
    const parent = new Controller();
    const child = new Controller();
    parent.linkChild(child);
    child.kill();
    expect(parent.isStopped()).toBe(false);
  });

  it('linking to a stopped or killed parent stops or kills the child at once', () => {
    const stopped = new Controller();
    stopped.stop();
    const a = new Controller();
    stopped.linkChild(a);
    expect(a.isStopped()).toBe(true);
    expect(a.isKilled()).toBe(false);
    const killed = new Controller();
    killed.kill();
    const b = new Controller();
    killed.linkChild(b);
    expect(b.isKilled()).toBe(true);
  });

  it('a cycle of links does not recurse forever', () => {
    const a = new Controller();
    const b = new Controller();
    a.linkChild(b);
    b.linkChild(a);
    a.kill();
    expect(a.isKilled()).toBe(true);
    expect(b.isKilled()).toBe(true);
  });

  it('refuses to link something that is not a context, or itself', () => {
    const context = new Controller();
    expect(() => context.linkChild({} as Controller)).toThrow('linkChild expects an AsyncEngineContext');
    expect(() => context.linkChild(context)).toThrow('A context cannot be linked as its own child');
  });
});

describe('Controller details', () => {
  it('hands out one signal, however often it is asked for', () => {
    const context = new Controller();
    expect(context.signal).toBe(context.signal);
  });

  it.each([
    ['null', null],
    ['a string', 'child'],
    ['an object without kill()', { stopGenerating() {} }],
  ])('refuses to link %s', (_, child) => {
    expect(() => new Controller().linkChild(child as unknown as Controller)).toThrow(
      'linkChild expects an AsyncEngineContext (an object with stopGenerating() and kill())',
    );
  });

  it('tells each child once, however often the parent is stopped or killed', () => {
    const calls: string[] = [];
    const child = {
      stopGenerating: () => calls.push('stop'),
      kill: () => calls.push('kill'),
    } as unknown as Controller;
    const parent = new Controller();
    parent.linkChild(child);
    parent.stop();
    parent.stopGenerating();
    parent.kill();
    parent.kill();
    expect(calls).toEqual(['stop', 'kill']);
  });
});
