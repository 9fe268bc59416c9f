// A misspelt setting must fail loudly: ignored, its default would run in production unnoticed.
import { type Problems, withHint } from './setting.js';

/**
 * Refuses a key no setting has, at the top or inside a group (`routing`, `retry`, `deadlines`,
 * ...), and a group that is not an object: a misspelt or misplaced setting would otherwise be
 * ignored without a word and its default used. `what` names a key where it was given
 * (`setting "x" in disagg.yaml`).
 */
export function rejectUnknown(
  values: Record<string, unknown>,
  known: readonly string[],
  what: (key: string) => string,
  problems: Problems,
): void {
  const tops = new Set(known.map((key) => key.split('.')[0] as string));
  const groups = new Set(known.filter((key) => key.includes('.')).map((key) => key.split('.')[0] as string));
  for (const [key, value] of Object.entries(values)) {
    if (!tops.has(key)) {
      // A group's own name is a candidate too: `routnig` is most likely `routing`.
      problems.add(withHint(`Unknown ${what(JSON.stringify(key))}`, key, [...known, ...groups]));
      continue;
    }
    if (!groups.has(key) || value === undefined) continue;
    if (typeof value !== 'object' || value === null || Array.isArray(value)) {
      const kind = key === 'deadlines' ? 'budgets' : 'settings';
      problems.add(`The ${what(JSON.stringify(key))}: ${key} must be an object of ${kind}`);
      continue;
    }
    for (const inner of Object.keys(value)) {
      const name = `${key}.${inner}`;
      if (!known.includes(name)) problems.add(withHint(`Unknown ${what(JSON.stringify(name))}`, name, known));
    }
  }
}
