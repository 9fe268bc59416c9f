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

/**
 * The forms in which a message may hold a worker's address: its URL (without trailing
 * slashes) and its `host:port`, longest first, so that a URL is replaced whole before its host.
 */
export function addressForms(url: string): string[] {
  const base = trimSlash(url);
  let host: string | undefined;
  try {
    host = new URL(base).host || undefined;
  } catch {
    host = undefined;
  }
  return host === undefined || host === base ? [base] : [base, host];
}

/**
 * A redaction of worker addresses: each worker's URL and `host:port` in a text become its
 * name (`name`, else `worker-<its position>`), so that a message can reach a client without
 * naming an internal address.
 *
 * @example
 * const redact = workerRedactor([{ url: 'http://10.0.0.7:8200', name: 'decode-a' }]);
 * redact('http://10.0.0.7:8200/v1/completions answered 503'); // 'decode-a/v1/completions answered 503'
 */
export function workerRedactor(workers: Iterable<{ url: string; name?: string }>): (text: string) => string {
  const pairs: Array<[string, string]> = [];
  let position = 0;
  for (const worker of workers) {
    const name = worker.name ?? `worker-${position}`;
    position++;
    for (const form of addressForms(worker.url)) pairs.push([form, name]);
  }
  pairs.sort((a, b) => b[0].length - a[0].length);
  return (text) => {
    let redacted = text;
    for (const [address, name] of pairs) redacted = redacted.replaceAll(address, name);
    return redacted;
  };
}

/** An origin in a URL (`http://10.0.0.7:8200`), or a bare `host:port` with a dotted or bracketed host. */
const ADDRESS =
  /\b[a-z][a-z0-9+.-]*:\/\/[^\s/"'<>]+|\[[0-9a-f:.]+\]:\d+|\b\d{1,3}(?:\.\d{1,3}){3}:\d+\b|\b(?=[\w-]*[a-z])[\w-]+(?:\.[\w-]+)+:\d+\b|\blocalhost:\d+\b/gi;

/**
 * Every address in a text (a URL's origin, a `host:port`) replaced with `worker`: the
 * redaction of last resort, for a message about workers whose names are not known. With the
 * workers at hand {@link workerRedactor} names each one instead.
 *
 * @example
 * redactAddresses('http://10.0.0.7:8200/v1/completions answered 503'); // 'worker/v1/completions answered 503'
 * redactAddresses('connect ECONNREFUSED 10.0.0.7:8200'); // 'connect ECONNREFUSED worker'
 */
export function redactAddresses(text: string): string {
  return text.replace(ADDRESS, 'worker');
}
