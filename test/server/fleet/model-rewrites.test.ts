import { describe, expect, it } from 'vitest';
import { ModelRewrites } from '../../../src/server/fleet/model-rewrites.js';
import { parseRewrites } from '../../../src/server/settings/rewrite-entries.js';

const canary = new ModelRewrites([
  {
    model: 'chat',
    targets: [
      { model: 'chat-v1', weight: 90 },
      { model: 'chat-v2', weight: 10 },
    ],
  },
  { model: 'old', targets: [{ model: 'new', weight: 1 }] },
]);

describe('model rewrites: weighted targets, one per session', () => {
  it('10,000 sessions split within a percent of the weights; each session always gets the same target', () => {
    const counts = new Map<string, number>();
    for (let i = 0; i < 10_000; i++) {
      const target = canary.targetFor('chat', `session-${i}`) as string;
      counts.set(target, (counts.get(target) ?? 0) + 1);
      expect(canary.targetFor('chat', `session-${i}`)).toBe(target);
    }
    expect(Math.abs((counts.get('chat-v2') ?? 0) / 10_000 - 0.1)).toBeLessThan(0.01);
    expect((counts.get('chat-v1') ?? 0) + (counts.get('chat-v2') ?? 0)).toBe(10_000);
  });

  it('without a session the draw is random, still by the weights; a model no rule names goes as asked', () => {
    let v2 = 0;
    for (let i = 0; i < 10_000; i++) if (canary.targetFor('chat', undefined) === 'chat-v2') v2++;
    expect(Math.abs(v2 / 10_000 - 0.1)).toBeLessThan(0.02);
    expect(canary.targetFor('other', 's')).toBeUndefined();
    expect(canary.targetFor(undefined, 's')).toBeUndefined();
    expect(canary.targetFor('old', 's')).toBe('new');
    for (const named of ['chat', 'chat-v1', 'chat-v2', 'old', 'new']) expect(canary.names(named)).toBe(true);
    expect(canary.names('other')).toBe(false);
  });

  it('a rule that does not check is refused naming it', () => {
    expect(() => parseRewrites([{ model: 'chat', targets: [] }])).toThrow('has a rewrite (chat) without targets');
    expect(() => parseRewrites([{ model: 'chat', targets: [{ model: 'v2', weight: 0 }] }])).toThrow(
      'whose target v2 weighs 0: a positive number',
    );
    expect(() =>
      parseRewrites([
        { model: 'chat', targets: [{ model: 'a' }] },
        { model: 'chat', targets: [{ model: 'b' }] },
      ]),
    ).toThrow('has two rewrites of the model "chat"');
    expect(() => parseRewrites('[{"model": "chat", "target": []}]')).toThrow(
      'unknown field "target"; did you mean "targets"?',
    );
    expect(parseRewrites('[{"model": "chat", "targets": [{"model": "v2"}]}]')).toEqual([
      { model: 'chat', targets: [{ model: 'v2', weight: 1 }] },
    ]);
  });
});
