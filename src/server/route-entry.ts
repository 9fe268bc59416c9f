import type { IncomingMessage, ServerResponse } from 'node:http';
import type { ProxyState } from './pipeline/proxy-state.js';

/** What a route's handler gets besides the exchange. */
export interface RouteCall {
  /** The path as routed (under the mount point). */
  path: string;
  /** The body when the caller has read it already (a framework that parses bodies). */
  body: string | undefined;
  /** What a route's `*` stands for in the path (`GET /v1/models/{id}`, `POST /admin/workers/{name}/drain`), URL-decoded. */
  rest: string | undefined;
}

/**
 * One route of the proxy: where it is, what it takes, how metrics name it, who may call it,
 * when it is there at all, and who answers it. Dispatch, the 405 with `Allow`, the `route`
 * label of the metrics and the fastify plugin all read {@link ROUTES}; a new route is one entry.
 *
 * @internal
 */
export interface RouteEntry {
  /**
   * The path; a `*` stands for one part of it or more (`/v1/models/*`; or between two parts: the admin API's drain, `/admin/workers/{*}/drain`),
   * which the handler gets as `rest`.
   */
  readonly path: string;
  /** The methods it takes (`HEAD` answers as `GET` without a body); undefined: its handler decides. */
  readonly methods: readonly string[] | undefined;
  /** Its `route` label in the metrics (a bounded set: never a path or an id). */
  readonly label: string;
  /** `api`: the API key when one is set (401 otherwise); `admin`: the admin key; `none`. */
  readonly auth: 'none' | 'api' | 'admin';
  /** Whether the route exists with these options (a 404 like any unknown path otherwise). */
  readonly present?: ((options: ProxyState['options']) => boolean) | undefined;
  handle(proxy: ProxyState, req: IncomingMessage, res: ServerResponse, call: RouteCall): Promise<void> | void;
}
