import { Gauge, type Registry } from 'prom-client';
import { packageVersion } from '../../util/package-version.js';

/**
 * Registers `disagg_build_info{version,node}`, always 1: which release of disagg (its
 * package.json version, as `disagg --version` prints it) runs on which Node.js. A gauge of 1
 * rather than labels on every series, so that a dashboard or alert can join or count
 * versions (`count by (version) (disagg_build_info)` during a rollout).
 *
 * @example
 * const registry = new Registry();
 * registerBuildInfo([registry]);
 *
 * @internal
 */
export function registerBuildInfo(registers: Registry[]): void {
  const info = new Gauge({
    name: 'disagg_build_info',
    help: 'Always 1: the version of disagg running (its package.json) and the Node.js version it runs on',
    labelNames: ['version', 'node'],
    registers,
  });
  info.set({ version: packageVersion(), node: process.version }, 1);
}
