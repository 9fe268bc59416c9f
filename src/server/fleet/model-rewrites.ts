import { hash32 } from '../../routing/hash.js';
import type { ProxyRewriteOption } from '../settings/rewrite-entries.js';

/**
 * The model rewrites of the settings, applied to each request before its pool is chosen: a
 * request for a rewritten model goes as one of its targets, in proportion to their weights.
 * A session (its key) always goes to the same target, so that an agent's turns stay on one
 * version and its cache; a request without one is drawn at random. A model no rule names goes
 * as asked.
 *
 * @example
 * const rewrites = new ModelRewrites([{ model: 'chat', targets: [{ model: 'v1', weight: 9 }, { model: 'v2', weight: 1 }] }]);
 * rewrites.targetFor('chat', 'session-42'); // 'v1' (or 'v2'), the same every time for that session
 * rewrites.targetFor('other', 'session-42'); // undefined: no rule
 *
 * @internal
 */
export class ModelRewrites {
  readonly #rules: ReadonlyMap<string, { targets: readonly string[]; bounds: readonly number[] }>;
  /** Every model a rule names, rewritten or target. */
  readonly #names: ReadonlySet<string>;

  constructor(rules: readonly ProxyRewriteOption[]) {
    this.#rules = new Map(
      rules.map((rule) => {
        const total = rule.targets.reduce((sum, target) => sum + target.weight, 0);
        let sum = 0;
        return [
          rule.model,
          {
            targets: rule.targets.map((target) => target.model),
            bounds: rule.targets.map((target) => {
              sum += target.weight;
              return sum / total;
            }),
          },
        ];
      }),
    );
    this.#names = new Set(rules.flatMap((rule) => [rule.model, ...rule.targets.map((target) => target.model)]));
  }

  /** Whether any rule is configured (the body stage asks nothing otherwise). */
  get any(): boolean {
    return this.#rules.size > 0;
  }

  /** Whether a rule names `model`, as the model it rewrites or as a target: a name the metrics' labels may hold. */
  names(model: string): boolean {
    return this.#names.has(model);
  }

  /** The targets of the rule of `model`, if a rule names it. */
  targetsOf(model: unknown): readonly string[] | undefined {
    return typeof model === 'string' ? this.#rules.get(model)?.targets : undefined;
  }

  /** The target `model` is sent as for the session `sessionKey`; undefined when no rule names `model`. */
  targetFor(model: unknown, sessionKey: string | undefined): string | undefined {
    if (typeof model !== 'string') return undefined;
    const rule = this.#rules.get(model);
    if (rule === undefined) return undefined;
    // A session's draw is its key's hash (with the model, so that two rules split a session independently).
    const draw = sessionKey === undefined ? Math.random() : hash32(`${model}\u0000${sessionKey}`) / 2 ** 32;
    const at = rule.bounds.findIndex((bound) => draw < bound);
    return rule.targets[at === -1 ? rule.targets.length - 1 : at];
  }
}
