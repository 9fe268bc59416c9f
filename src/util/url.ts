/** `base` without its trailing slashes: `http://p0:8000/` and `http://p0:8000` name one worker. */
export function trimSlash(base: string): string {
  let end = base.length;
  while (end > 0 && base[end - 1] === '/') end--;
  return base.slice(0, end);
}

/** A worker's URL for `path` (which starts with `/`), whether or not `base` ends with a slash. */
export function joinUrl(base: string, path: string): string {
  return `${trimSlash(base)}${path}`;
}

/**
 * Whether `url` was called on the worker at `base`: its own URL or one under it. A plain
 * prefix test would take `http://decode-10/...` for a call to `http://decode-1`.
 */
export function isUnder(url: string, base: string): boolean {
  const root = trimSlash(base);
  return url === root || url.startsWith(`${root}/`);
}
