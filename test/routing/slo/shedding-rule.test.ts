import { describe, expect, it } from 'vitest';
import { RoutingInput } from '../../../src/routing/routing-input.js';
import { shedForServiceLevels } from '../../../src/routing/slo/shedding-rule.js';

const input = (priority: number, unmeetable: string[]) => {
  const made = new RoutingInput({ prompt: 'Hi' });
  made.priority = priority;
  for (const leg of unmeetable) made.noteUnmeetable(leg);
  return made;
};

describe('shedding for service levels', () => {
  it('sheds a sheddable request (priority below 0) with a leg no worker is predicted to meet', () => {
    expect(shedForServiceLevels(input(-1, ['decode']))).toBe(true);
    expect(shedForServiceLevels(input(-5, ['prefill', 'decode']))).toBe(true);
  });

  it('serves one of priority 0 or more, best effort, and a sheddable one whose legs are all met', () => {
    expect(shedForServiceLevels(input(0, ['decode']))).toBe(false);
    expect(shedForServiceLevels(input(3, ['prefill']))).toBe(false);
    expect(shedForServiceLevels(input(-1, []))).toBe(false);
  });

  it('a new decision of the request (its picks cleared) is judged afresh', () => {
    const retried = input(-1, ['decode']);
    retried.clearPicked();
    expect(shedForServiceLevels(retried)).toBe(false);
  });
});
