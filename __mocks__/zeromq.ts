// `vi.mock('zeromq')` redirects here (vitest looks for a package's mock in <root>/__mocks__): the
// in-memory sockets of test/support/fake-zeromq.ts, without the native module.
export * from '../test/support/fake-zeromq.js';
