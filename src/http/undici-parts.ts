// The parts of undici the library uses, and only those: its connection pools (`Agent`) and its
// request API. undici's entry point also loads fetch, WebSocket,
// EventSource, its cache and its mocks, which nothing here uses: 7 MB of an idle proxy's
// resident set. undici is pinned exactly (package.json) and these are its own modules at that
// version; test/http/undici-parts.test.ts checks that they are the very objects its entry
// point exports, so an upgrade that moves them fails there, not in production.
import { createRequire } from 'node:module';
import type * as Undici from 'undici';

const load = createRequire(import.meta.url);

/** undici's `Agent`: a pool of connections per origin. */
export const Agent: typeof Undici.Agent = load('undici/lib/dispatcher/agent.js');
/** An undici `Agent`. */
export type Agent = Undici.Agent;

let shared: Agent | undefined;

/**
 * The library's own keep-alive pool, made on first use and shared by every call that is given
 * no dispatcher (`httpEngine`, the fakes, `request`). Not undici's global one: that slot
 * (`Symbol.for('undici.globalDispatcher.1')`) is the process's, and Node 20 and 22 fill it with
 * the older undici they bundle as soon as anything touches `fetch`, `Request`, `Response` or
 * `Headers`; that dispatcher refuses the handler API the calls to workers use. Its idle
 * sockets do not keep the process alive (undici unrefs them).
 */
export function sharedDispatcher(): Agent {
  shared ??= new Agent();
  return shared;
}

const requestWith = load('undici/lib/api/api-request.js') as (
  this: Undici.Dispatcher,
  options: Undici.Dispatcher.RequestOptions,
) => Promise<Undici.Dispatcher.ResponseData>;

/** What {@link request} takes: undici's request options, with the dispatcher to send through. */
export type RequestOptions = Omit<Undici.Dispatcher.RequestOptions, 'origin' | 'path' | 'method'> & {
  method?: Undici.Dispatcher.HttpMethod | undefined;
  /** The library's own pool ({@link sharedDispatcher}) by default. */
  dispatcher?: Undici.Dispatcher | undefined;
};

/**
 * undici's `request(url, options)`: one call through `options.dispatcher` (the library's own
 * pool by default), answered with the status, headers and a body to read. A GET unless `method` says.
 *
 * @throws whatever undici throws for the call (a refused connection, a timeout, an abort).
 * @example
 * const answer = await request('http://worker:8000/health', { signal: AbortSignal.timeout(1000) });
 */
export function request(url: string | URL, options: RequestOptions = {}): Promise<Undici.Dispatcher.ResponseData> {
  const { origin, pathname, search } = typeof url === 'string' ? new URL(url) : url;
  const { dispatcher = sharedDispatcher(), method = 'GET', ...rest } = options;
  return requestWith.call(dispatcher, { ...rest, origin, path: `${pathname}${search}`, method });
}
