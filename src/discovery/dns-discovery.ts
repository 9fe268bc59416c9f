import { promises as dns } from 'node:dns';
import { isIPv6 } from 'node:net';
import type { Logger } from '../runtime/logger.js';
import { type DiscoveredWorker, type DiscoveryRole, type MembershipTarget, reconcile } from './worker-set.js';

/** How often a name is resolved again by default (`--dns-interval-ms` shows and applies it). */
export const DNS_INTERVAL_MS = 10_000;

/** Resolves a host name to all its addresses (`dns.promises.lookup` with `all: true` by default). */
export type Lookup = (hostname: string) => Promise<ReadonlyArray<{ address: string }>>;

/** Options of {@link DnsDiscovery}. */
export interface DnsDiscoveryOptions {
  role: DiscoveryRole;
  /** `http(s)://name:port[/base]`: every address `name` resolves to is a worker at that port. */
  url: string;
  /** How often the name is resolved again; 10,000 ms by default. */
  intervalMs?: number | undefined;
  target: MembershipTarget;
  logger: Logger;
  /** The resolver; the system's (`getaddrinfo`, as the rest of Node connects) by default. */
  lookup?: Lookup | undefined;
}

const systemLookup: Lookup = (hostname) => dns.lookup(hostname, { all: true });

/** Codes that mean the name has no address now (a headless Service without ready pods), not that DNS failed. */
const NO_ADDRESS = new Set(['ENOTFOUND', 'ENODATA']);

/**
 * Workers from DNS, as a Kubernetes headless Service publishes its ready pods: the URL's host
 * is resolved at `start()` and every `intervalMs`; each address is a worker (same scheme, port
 * and path); an address no longer returned drains. A name with no address drains them all
 * (logged at warn); a resolver failure (timeout, `EAI_AGAIN`) changes nothing until a round
 * succeeds. Rounds do not overlap; the timer does not keep the process alive.
 *
 * @example
 * const discovery = new DnsDiscovery({ role: 'decode', url: 'http://decode-headless.llm.svc:8200', target, logger });
 * await discovery.start(); // first round done
 * // ... discovery.stop() at shutdown
 */
export class DnsDiscovery {
  readonly #options: DnsDiscoveryOptions;
  readonly #url: URL;
  readonly #lookup: Lookup;
  #timer: NodeJS.Timeout | undefined;
  #round: Promise<void> | undefined;
  #stopped = false;

  constructor(options: DnsDiscoveryOptions) {
    this.#options = options;
    this.#url = new URL(options.url);
    this.#lookup = options.lookup ?? systemLookup;
  }

  /** Runs the first round (resolves when it is done, whatever it found), then one every interval. */
  async start(): Promise<void> {
    this.#stopped = false;
    await this.refresh();
    if (this.#stopped || this.#timer !== undefined) return;
    this.#timer = setInterval(() => void this.refresh(), this.#options.intervalMs ?? DNS_INTERVAL_MS);
    this.#timer.unref();
  }

  stop(): void {
    this.#stopped = true;
    if (this.#timer !== undefined) clearInterval(this.#timer);
    this.#timer = undefined;
  }

  /** One round now (or the one under way): resolve, then bring the pool to what was found. Never rejects. */
  refresh(): Promise<void> {
    this.#round ??= this.#resolveAndReconcile().finally(() => {
      this.#round = undefined;
    });
    return this.#round;
  }

  async #resolveAndReconcile(): Promise<void> {
    const { role, target, logger } = this.#options;
    const host = this.#url.hostname;
    let addresses: string[];
    try {
      addresses = [...new Set((await this.#lookup(host)).map((answer) => answer.address))].sort();
    } catch (error) {
      const code = (error as { code?: unknown } | null)?.code;
      if (typeof code !== 'string' || !NO_ADDRESS.has(code)) {
        logger.warn({ err: error, role, host }, 'DNS discovery could not resolve its name; the pool is left as it is');
        return;
      }
      addresses = [];
    }
    if (this.#stopped) return;
    if (addresses.length === 0) logger.warn({ role, host }, 'DNS discovery found no address: its workers drain');
    const found = addresses.map((address) => this.#worker(address));
    const { added, drained } = await reconcile(target, role, found, logger);
    if (added > 0 || drained > 0) {
      logger.info({ role, host, addresses: addresses.length, added, drained }, 'DNS discovery changed the pool');
    }
  }

  #worker(address: string): DiscoveredWorker {
    const url = new URL(this.#url.href);
    url.hostname = isIPv6(address) ? `[${address}]` : address;
    return { url: url.href.endsWith('/') ? url.href.slice(0, -1) : url.href };
  }
}
