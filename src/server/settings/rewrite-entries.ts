// Model rewrites (`rewrites:` in a settings file, `--rewrites` as JSON): a model clients ask
// for, served by weighted targets (a canary beside the stable version, a migration from one
// model to another), as llm-d's InferenceModelRewrite maps a model to weighted targets.
import { describeValue } from '../../util/describe-value.js';
import { Invalid, withHint } from './setting.js';

/** One target of a rewrite: the model the request is sent as, and its share (a positive number). */
export interface RewriteTarget {
  model: string;
  weight: number;
}

/**
 * A rewrite: requests for `model` are sent as one of `targets`, each with its weight's share;
 * the same session (the session key: its header, or the body's `user`) always to the same one.
 *
 * @example
 * const rewrites: ProxyRewriteOption[] = [
 *   { model: 'chat', targets: [{ model: 'chat-v1', weight: 90 }, { model: 'chat-v2', weight: 10 }] },
 * ];
 */
export interface ProxyRewriteOption {
  model: string;
  targets: readonly RewriteTarget[];
}

const FIELDS = ['model', 'targets'];

/**
 * The rewrites of a settings file's list (a flag's or variable's JSON), each checked: a model,
 * at least one target, each target a model and a positive weight; one rule per model.
 *
 * @throws {Invalid} saying which rule and field is wrong.
 */
export function parseRewrites(value: unknown): ProxyRewriteOption[] {
  let list = value;
  if (typeof value === 'string') {
    try {
      list = JSON.parse(value);
    } catch {
      throw new Invalid(
        'is not JSON: give a list of rules, [{"model": "chat", "targets": [{"model": "chat-v2", "weight": 10}]}]',
      );
    }
  }
  if (!Array.isArray(list)) throw new Invalid(`takes a list of rewrites, got ${describeValue(list)}`);
  const seen = new Set<string>();
  return list.map((entry: unknown, index): ProxyRewriteOption => {
    const at = `#${index + 1}`;
    if (typeof entry !== 'object' || entry === null || Array.isArray(entry)) {
      throw new Invalid(`has a rewrite (${at}) that is not an object: ${describeValue(entry)}`);
    }
    const rule = entry as Record<string, unknown>;
    for (const field of Object.keys(rule)) {
      if (!FIELDS.includes(field)) {
        throw new Invalid(
          withHint(`has a rewrite (${at}) with an unknown field ${JSON.stringify(field)}`, field, FIELDS),
        );
      }
    }
    if (typeof rule.model !== 'string' || rule.model === '') {
      throw new Invalid(`has a rewrite (${at}) whose model is ${describeValue(rule.model)}: the model clients ask for`);
    }
    if (seen.has(rule.model))
      throw new Invalid(`has two rewrites of the model ${JSON.stringify(rule.model)}: give it one`);
    seen.add(rule.model);
    if (!Array.isArray(rule.targets) || rule.targets.length === 0) {
      throw new Invalid(`has a rewrite (${rule.model}) without targets: give at least one { model, weight }`);
    }
    const targets = rule.targets.map((target: unknown): RewriteTarget => {
      const { model, weight = 1 } = (target ?? {}) as { model?: unknown; weight?: unknown };
      if (typeof model !== 'string' || model === '') {
        throw new Invalid(`has a rewrite (${rule.model}) with a target whose model is ${describeValue(model)}`);
      }
      if (typeof weight !== 'number' || !(weight > 0) || !Number.isFinite(weight)) {
        throw new Invalid(
          `has a rewrite (${rule.model}) whose target ${model} weighs ${describeValue(weight)}: a positive number`,
        );
      }
      return { model, weight };
    });
    return { model: rule.model, targets };
  });
}
