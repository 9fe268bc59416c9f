// What the agents' APIs' bodies hold item by item (Responses' input items and their content
// parts, Anthropic's messages and their content blocks), checked before any worker: a part of
// a type neither API documents, a number where an item belongs, an unknown role would
// otherwise reach both legs, and the engine refuse it only at prefill. Each API keeps its
// types as data in its own module (`responses-items`, `messages-blocks`); this is what they
// share: a problem found at a path, said as a zod issue of the field, so that the endpoint's
// schema stays the one description of a body that fits.

import * as z from 'zod/mini';
import { closest } from '../util/closest.js';

/** Where in a list field a part is at fault (`[3, 'content', 0, 'type']` of `input`) and what it must be. */
export interface ContentProblem {
  readonly path: ReadonlyArray<string | number>;
  /** What was expected, starting with `must` (the value given is added by whoever reports it). */
  readonly message: string;
  /**
   * The value at fault is said by its kind only (`a string of 40 characters`), never its
   * content: an item or a content of the wrong shape may be the user's prompt, and a refusal's
   * message goes to the log.
   */
  readonly quiet?: boolean;
}

/** A {@link ContentProblem} as zod's refinement context takes it: a `custom` issue, the one code zod leaves to its users. */
type CustomIssue = Parameters<z.core.$RefinementCtx['addIssue']>[0];

/**
 * A check of a list field (Responses' `input`, Anthropic's `messages` and `system`) by `find`,
 * as a zod check of that field: the first problem it finds becomes the issue at its path under
 * the field (zod prefixes the field's own).
 *
 * @example
 * const input = z.array(z.unknown()).check(contentCheck(responsesInputProblem));
 * input.safeParse([42]).error?.issues[0]; // { code: 'custom', path: [0], message: 'must be an input item (an object)' }
 */
export function contentCheck(find: (list: readonly unknown[]) => ContentProblem | undefined) {
  return z.superRefine<unknown[]>((list, ctx) => {
    const problem = find(list);
    if (problem === undefined) return;
    const issue: CustomIssue = {
      code: 'custom',
      path: [...problem.path],
      message: problem.message,
      input: undefined,
      ...(problem.quiet === true ? { params: { quiet: true } } : {}),
    };
    ctx.addIssue(issue);
  });
}

/**
 * Whether `value` is a JSON object (not an array, not null).
 *
 * @example
 * isObject({ type: 'text' }); // true
 * isObject([1]); // false
 */
export const isObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

/**
 * What a value must be, when it must be one of `known`: the list itself when short, else its
 * name (`what`) with the closest known one when `given` looks like a typo of it.
 *
 * @example
 * oneOf('a role', ['user', 'assistant'], 'root'); // 'must be one of user, assistant'
 * oneOf("one of the Responses API's item types", RESPONSES_ITEM_TYPES, 'functon_call');
 * // "must be one of the Responses API's item types (did you mean function_call?)"
 */
export function oneOf(what: string, known: readonly string[], given: unknown): string {
  if (known.length <= 8) return `must be one of ${known.join(', ')}`;
  const near = typeof given === 'string' ? closest(given, known) : undefined;
  return `must be ${what}${near === undefined ? '' : ` (did you mean ${near}?)`}`;
}
