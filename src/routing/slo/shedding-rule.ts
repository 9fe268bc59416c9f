import type { RoutingInput } from '../routing-input.js';

/**
 * Whether a decided request is to be shed for its service levels rather than served: it is
 * sheddable (priority below 0, llm-d's rule) and an SLO-aware filter found no worker of one of
 * its legs' pools predicted to meet them (`input.unmeetable`). One of priority 0 or more is
 * served then, best effort. Asked after the scheduler's decision, before any worker is called:
 * `disagg serve` and `disagg epp` answer it 429, and a simulation of the fleet may count it so.
 *
 * @example
 * const input = new RoutingInput({ prompt: 'Hi' });
 * input.priority = -1;
 * input.noteUnmeetable('decode');
 * shedForServiceLevels(input); // true
 */
export function shedForServiceLevels(input: RoutingInput): boolean {
  return input.priority < 0 && input.unmeetable.length > 0;
}
