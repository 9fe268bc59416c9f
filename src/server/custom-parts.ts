import type { Engine } from '../flow/disaggregate.js';
import { describeValue } from '../util/describe-value.js';
import type { Route } from './openai-format.js';
import type { EngineHook } from './settings/types.js';

// The types of the parts of your own live with the settings that check them
// (settings/types.ts); the package's entry exports them from here.
export type { EngineHook, PolicyOption } from './settings/types.js';

/** The hook's engine for `leg`, checked as it is made: a hook that answers no engine is the program's mistake. */
export function hookedEngine(
  hook: EngineHook,
  leg: 'prefill' | 'decode',
  proxyEngine: Engine<{ url: string }>,
  route: Route,
): Engine<{ url: string }> {
  const engine = hook(leg, proxyEngine, route);
  if (typeof engine !== 'function') {
    throw new TypeError(
      `The engine option answered ${describeValue(engine)} for the ${leg} leg: it must answer an engine (a function)`,
    );
  }
  return engine;
}
