// The decode-pod sidecar's half of the Gateway API's P/D protocol (llm-d's): an endpoint picker
// sent the request to this decode pod and named its prefill worker in a header; the sidecar
// checks that worker against its allow-list and runs the handoff itself. The picker's side is
// src/epp/.
import { isIP } from 'node:net';
import { engineOf } from '../../engines/registry.js';
import { headerValue } from '../../http/node-server.js';
import { Scheduler } from '../../routing/scheduler.js';
import { WorkerPool } from '../../routing/worker-pool.js';
import { branded, DisaggError } from '../../util/disagg-error.js';
import { Networks } from '../../util/networks.js';
import type { ProxyPrefillWorker } from '../settings/worker-entries.js';
import type { ModelPool } from './pool-set.js';

/** The header by which an endpoint picker names the prefill worker(s) of a request: `ip:port[,ip:port]`. */
export const PREFILLER_HEADER = 'x-prefiller-host-port';

/**
 * The P/D headers an endpoint picker adds for the decode pod's sidecar (llm-d's names). The
 * sidecar reads the first and never passes any to a worker: a worker is called with the
 * router's own headers only. `x-data-parallel-host-port`, `x-kv-cache-source-host-port` and
 * `x-encoder-hosts-ports` are not acted on (see the sidecar's docs).
 */
export const PD_HEADERS = [
  PREFILLER_HEADER,
  'x-data-parallel-host-port',
  'x-kv-cache-source-host-port',
  'x-encoder-hosts-ports',
] as const;

/** Why a request of a sidecar is served on its decode worker alone: its picker named no prefill worker. */
export const NO_PREFILL_HEADER = 'no-prefill-header';

/**
 * A prefill target a request named that the sidecar will not call (`DISAGG_PREFILL_TARGET_REFUSED`,
 * answered 403 before any worker is called): not an `ip:port` or `host:port`, or outside the
 * allow-list (`--prefill-allow` and the prefill workers given or discovered). The guard against
 * a request that makes the sidecar call an address of its choosing (SSRF).
 */
export class PrefillTargetError extends DisaggError {
  static override readonly is = branded<PrefillTargetError>('PrefillTargetError');
  declare readonly code: 'DISAGG_PREFILL_TARGET_REFUSED';

  constructor(message: string) {
    super('DISAGG_PREFILL_TARGET_REFUSED', message);
  }
}

/** Options of {@link PrefillTargets}. */
export interface PrefillTargetsOptions {
  /** The networks a named prefill worker may be in (`10.0.0.0/8`, `fd00::/8`, a single address). */
  allow: readonly string[];
  /** The engine of the decode worker (SGLang's prefill needs a bootstrap port). */
  engine: Parameters<typeof engineOf>[0];
  /** The bootstrap port of an SGLang prefill worker named by address alone (`--bootstrap-port`). */
  bootstrapPort: number;
  /** Retries of a request whose prefill leg failed, on the worker(s) its header named; 0 by default, as llm-d's sidecar. */
  maxRetries?: number | undefined;
}

/**
 * Where a sidecar's requests take their prefill from: the header its endpoint picker set
 * ({@link PREFILLER_HEADER}), each entry checked against the allow-list before any call. A
 * request gets a pool of its own: the named prefill worker(s), in the header's order, and the
 * local decode worker(s); without the header, the decode worker alone.
 *
 * @example
 * const targets = new PrefillTargets({ allow: ['10.0.0.0/8'], engine: 'vllm', bootstrapPort: 8998 });
 * const pool = targets.poolFor(localPool, { 'x-prefiller-host-port': '10.0.0.5:8000' });
 * pool.prefill.workers; // [{ url: 'http://10.0.0.5:8000', name: 'prefill-target' }]
 * targets.poolFor(localPool, { 'x-prefiller-host-port': '169.254.169.254:80' }); // throws PrefillTargetError
 */
export class PrefillTargets {
  readonly #networks: Networks;
  readonly #options: PrefillTargetsOptions;
  /** Each pool's own pool without prefill (the decode alone), built once. */
  readonly #alone = new WeakMap<ModelPool, ModelPool>();

  /** @throws {TypeError} for an entry of `allow` that is no address or CIDR. */
  constructor(options: PrefillTargetsOptions) {
    this.#options = options;
    this.#networks = new Networks(options.allow);
  }

  /** Retries of a request from prefill, on the named worker(s). */
  get maxRetries(): number {
    return this.#options.maxRetries ?? 0;
  }

  /**
   * The pool `request` is served by, out of `base` (the local decode worker's): with the
   * header, its named prefill worker(s); without it, `base`'s decode alone (aggregated, as
   * {@link NO_PREFILL_HEADER}). A worker `base.prefill` lists (given or discovered) is taken
   * with its own record (its name, SGLang bootstrap port); any other must be in `allow`.
   *
   * @throws {PrefillTargetError} for an entry that is malformed or not allowed; nothing is called.
   */
  poolFor(base: ModelPool, headers: Readonly<Record<string, string | string[] | undefined>>): ModelPool {
    const named = headerValue(headers[PREFILLER_HEADER])?.trim();
    if (named === undefined || named === '') return this.#decodeAlone(base);
    const targets = named.split(',').map((entry) => this.#target(entry.trim(), base));
    const prefill = new WorkerPool(targets, { selection: 'round-robin' });
    return {
      ...base,
      prefill,
      // The picker decided to disaggregate: no decider, the sidecar does not decide again.
      scheduler: new Scheduler({
        prefillWorkers: prefill,
        decodeWorkers: base.decode,
        noPrefillWorker: 'fail',
        model: base.model,
      }),
    };
  }

  #decodeAlone(base: ModelPool): ModelPool {
    let alone = this.#alone.get(base);
    if (alone === undefined) {
      alone = {
        ...base,
        // Decided by the picker (no prefill pod named): the scheduler says so, whoever asks it.
        scheduler: new Scheduler({ decodeWorkers: base.decode, model: base.model, decider: () => NO_PREFILL_HEADER }),
      };
      this.#alone.set(base, alone);
    }
    return alone;
  }

  /** The worker to call for one entry of the header. */
  #target(entry: string, base: ModelPool): ProxyPrefillWorker {
    const address = hostPort(entry);
    if (address === undefined) {
      throw new PrefillTargetError(`${PREFILLER_HEADER} names ${JSON.stringify(entry)}, which is not host:port`);
    }
    const url = `http://${address.ip === 6 ? `[${address.host}]` : address.host}:${address.port}`;
    const known = base.prefill.workers.find((worker) => sameOrigin(worker.url, url));
    if (known !== undefined) return known;
    if (!this.#networks.has(address.host)) {
      throw new PrefillTargetError(
        `${PREFILLER_HEADER} names a prefill worker outside this sidecar's allow-list (--prefill-allow, and the prefill workers given or discovered)`,
      );
    }
    const bootstrap = engineOf(this.#options.engine).prefillBootstrap
      ? { bootstrapPort: this.#options.bootstrapPort }
      : {};
    return { url, name: 'prefill-target', ...bootstrap };
  }
}

/** `host:port` or `[v6]:port` as its parts (`ip`: 4, 6, or 0 for a name); undefined when malformed. */
function hostPort(entry: string): { host: string; port: number; ip: 0 | 4 | 6 } | undefined {
  const match = /^(?:\[([0-9a-fA-F:.]+)\]|([^:[\]\s/@]+)):(\d{1,5})$/.exec(entry);
  if (match === null) return undefined;
  const host = (match[1] ?? match[2]) as string;
  const port = Number(match[3]);
  if (port < 1 || port > 65535) return undefined;
  const ip = isIP(host) as 0 | 4 | 6;
  if (match[1] !== undefined && ip !== 6) return undefined;
  return { host, port, ip };
}

/** Whether two worker URLs name one origin (`http://10.0.0.5:8000/` and `http://10.0.0.5:8000`). */
function sameOrigin(a: string, b: string): boolean {
  try {
    return new URL(a).host === new URL(b).host;
  } catch {
    return false;
  }
}
