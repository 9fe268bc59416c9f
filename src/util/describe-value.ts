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

/**
 * What kind of value `value` is, without its content: for a value that may be a user's prompt
 * (an item or content of the wrong shape), whose text no error message may carry into a log.
 *
 * @example
 * describeKind('my secret prompt'); // 'a string of 16 characters'
 * describeKind({ text: 'Hi' }); // 'an object'
 * describeKind(42); // '42'
 */
export function describeKind(value: unknown): string {
  // An empty one says nothing: shown as it is.
  if (value === '' || (Array.isArray(value) && value.length === 0)) return JSON.stringify(value);
  if (typeof value === 'string') return `a string of ${value.length} character${value.length === 1 ? '' : 's'}`;
  if (Array.isArray(value)) return `a list of ${value.length}`;
  if (typeof value === 'object' && value !== null) return 'an object';
  return describeValue(value);
}
