import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import type { WorkerPool } from '../routing/worker-pool.js';
import type { Logger } from '../runtime/logger.js';
import { ProxyCore } from '../server/proxy-core.js';
import { ROUTES } from '../server/routes.js';
import type { ProxyOptions } from '../server/settings/proxy-options.js';
import { resolveProxyOptions } from '../server/settings/resolve.js';
import type { ProxyDecodeWorker, ProxyPrefillWorker } from '../server/settings/worker-entries.js';

/** Options of {@link disaggPlugin}: the proxy's (the app's logger unless one is given), and whether to serve `/metrics`. */
export interface DisaggPluginOptions extends Omit<ProxyOptions, 'logger'> {
  logger?: Logger | undefined;
  /** Serve the proxy's `/metrics` under the prefix; true by default (false when the app serves its own registry, see `metricsRegistry`). */
  metricsRoute?: boolean | undefined;
  /** fastify's own: the path the routes are mounted under. */
  prefix?: string | undefined;
}

/** What the plugin decorates its context with (`app.disagg` inside it, and `onReady` for the app). */
export interface DisaggFastify {
  readonly prefillWorkers: WorkerPool<ProxyPrefillWorker>;
  readonly decodeWorkers: WorkerPool<ProxyDecodeWorker>;
}

/**
 * The proxy's routes in a fastify app: `app.register(disaggPlugin, { prefix: '/llm', connector,
 * prefill, decode })`. They run behind the app's own hooks (auth, rate limits: `onRequest` and
 * `preHandler` hooks the app added before registering the plugin run first), log through the
 * app's logger (`request` ids and all), and answer with the same flow, checks, errors and
 * headers as `disagg serve`. Bodies reach the proxy as text (its own JSON parsing keeps 64-bit
 * integers exact), within `maxBodyBytes`. The workers are probed when the app is ready, and
 * the proxy shuts down with the app (`app.close()`): requests under way get the grace period,
 * then end cleanly. Create the app with `forceCloseConnections: true` so that `close()` does
 * not wait on clients that keep a streaming connection open after leaving.
 *
 * `/metrics` serves the proxy's registry (`metricsRoute: false` to leave it out); give
 * `metricsRegistry` (a prom-client `Registry`) to have the proxy's metrics in the app's own.
 *
 * @example
 * import Fastify from 'fastify';
 * import { disaggPlugin } from 'disagg/fastify';
 * const app = Fastify({ logger: true });
 * app.addHook('onRequest', checkApiKey);
 * await app.register(disaggPlugin, { prefix: '/llm', connector: 'vllm', prefill: [{ url: 'http://p0:8100' }], decode: [{ url: 'http://d0:8200' }] });
 * await app.listen({ port: 8000 });
 */
export const disaggPlugin: FastifyPluginAsync<DisaggPluginOptions> = async (app, options) => {
  const { metricsRoute = true, prefix: _prefix, logger, ...proxy } = options;
  const core = new ProxyCore(resolveProxyOptions({ ...proxy, logger: logger ?? (app.log as unknown as Logger) }));
  const decoration: DisaggFastify = { prefillWorkers: core.prefillWorkers, decodeWorkers: core.decodeWorkers };
  app.decorate('disagg', decoration);
  // Bodies as text: the proxy parses them itself (exact integers, its own 400s and 413s).
  app.removeAllContentTypeParsers();
  app.addContentTypeParser(
    '*',
    { parseAs: 'string', bodyLimit: core.options.maxBodyBytes },
    (_request: FastifyRequest, body: string | Buffer, done: (error: Error | null, body?: string) => void) =>
      done(null, typeof body === 'string' ? body : body.toString('utf8')),
  );
  const base = app.prefix;
  const handler = async (request: FastifyRequest, reply: FastifyReply): Promise<void> => {
    reply.hijack();
    const url = request.raw.url ?? '/';
    const query = url.indexOf('?');
    const full = query === -1 ? url : url.slice(0, query);
    const path = base !== '' && full.startsWith(base) ? full.slice(base.length) || '/' : full;
    const body = typeof request.body === 'string' ? request.body : undefined;
    core.answer(request.raw, reply.raw, { path, ...(body === undefined ? {} : { body }) });
  };
  // The proxy's routes as it has them, each for every method: the proxy answers a wrong one
  // with its 405 and Allow, as disagg serve does. /metrics follows `metricsRoute` here (the
  // app may serve its own registry), not a metrics port.
  // fastify takes a wildcard only at the end: a route with one between two parts
  // (`/admin/workers/{*}/drain`) is reached through the wildcard of its first part.
  const mounted = new Set<string>();
  for (const route of ROUTES) {
    const present = route.label === 'metrics' ? metricsRoute : (route.present?.(core.options) ?? true);
    const star = route.path.indexOf('*');
    const path = star === -1 ? route.path : route.path.slice(0, star + 1);
    if (!present || mounted.has(path)) continue;
    mounted.add(path);
    app.all(path, handler);
  }
  app.addHook('onReady', () => core.start());
  // fastify stops accepting and closes its server itself, after preClose: requests under way
  // get the grace period here and are then ended, so that their connections can close.
  app.addHook('preClose', () =>
    core.shutdown(
      {
        accepting: () => false,
        // fastify closed the idle connections before the ones ended just now became idle.
        cutConnections: () => app.server.closeIdleConnections(),
      },
      { drainDelayMs: 0, gracePeriodMs: core.options.gracePeriodMs },
    ),
  );
};

declare module 'fastify' {
  interface FastifyInstance {
    /**
     * The proxy's pools, inside the context that registered {@link disaggPlugin} (its routes,
     * hooks and child plugins): undefined on the app around it, since the plugin is
     * encapsulated as fastify plugins are. Reach the pools from the app through a hook or route
     * registered inside the plugin's context, or keep them from `createHandler` instead.
     */
    disagg?: DisaggFastify;
  }
}
