// The `disagg/fastify` subpath: the proxy's routes as a fastify plugin (fastify is an
// optional peer, loaded only by this subpath).
export { type DisaggFastify, type DisaggPluginOptions, disaggPlugin } from './disagg-plugin.js';
