/**
 * A short, safe description of an arbitrary value for error messages: never throws, never
 * dumps a huge object.
 */
export function describeValue(value: unknown): string {
  if (value === undefined) return 'undefined';
  if (typeof value === 'string') return JSON.stringify(value.length > 80 ? `${value.slice(0, 77)}...` : value);
  if (typeof value === 'function') return `a function${value.name ? ` (${value.name})` : ''}`;
  if (typeof value !== 'object' || value === null) return String(value);
  try {
    const json = JSON.stringify(value);
    if (json !== undefined) return json.length > 80 ? `${json.slice(0, 77)}...` : json;
  } catch {
    // Circular or hostile objects fall through to the tag below.
  }
  return Object.prototype.toString.call(value);
}
