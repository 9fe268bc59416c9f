import { hash32, workerId } from './hash.js';
import type { RoutingInput } from './routing-input.js';
import { type LoadView, leastLoaded, type RoutingPolicy } from './routing-policy.js';

/** Options of {@link consistentHash}. */
export interface ConsistentHashOptions<W> {
  /** Points each worker has on the ring: more spread the keys more evenly; 160 by default. */
  virtualNodes?: number | undefined;
  /**
   * How much of the routing text is the key of a request without a session key: 2,048
   * characters by default (a system prompt and the first turn), so that requests that start
   * alike land alike.
   */
  keyChars?: number | undefined;
  /**
   * Bounded loads (Mirrokni, Thorup and Zadimoghaddam): a worker takes a request only while its
   * requests in flight stay within `loadFactor` times the mean (rounded up); past it the next
   * worker on the ring does. 2 by default (measured by `npm run bench:routing` against 1.25 and
   * pure hashing: it keeps most conversations in place and still spreads hot keys); `Infinity`
   * for pure hashing, under which four system prompts on four workers put two on one.
   */
  loadFactor?: number | undefined;
  /** A worker's stable name: its `url` by default. */
  idOf?: ((worker: W) => string) | undefined;
}

/**
 * A hash ring (Karger's consistent hashing, as SGLang's gateway and vllm-project/router offer
 * it): each worker owns `virtualNodes` points; a request goes to the owner of the first point
 * at or after its key's hash, skipping workers out of rotation. The key is the session key
 * when there is one, else the start of the routing text. No state is learnt, so every router
 * replica sends the same request to the same worker (while no worker is past its bound of
 * load), and a worker that joins or leaves moves only the keys it takes or held (about 1/n of
 * them). A worker past `loadFactor` (2) times the mean load passes the request on along the ring.
 * Without a key, least in flight.
 *
 * @example
 * new WorkerPool(workers, { selection: consistentHash() });
 *
 * @throws {TypeError} for `virtualNodes` or `keyChars` that is not a positive whole number.
 */
export function consistentHash<W>(options: ConsistentHashOptions<W> = {}): RoutingPolicy<W> {
  const virtualNodes = positive(options.virtualNodes ?? 160, 'virtualNodes');
  const keyChars = positive(options.keyChars ?? 2048, 'keyChars');
  const loadFactor = options.loadFactor ?? 2;
  if (!(loadFactor >= 1)) {
    throw new TypeError(`consistentHash: loadFactor must be a number of 1 or more, got ${String(loadFactor)}`);
  }
  const idOf = options.idOf ?? ((worker: W) => workerId(worker, 'consistentHash'));
  // The ring of every worker seen, sorted by point; a worker's points depend on its name only.
  let ring: Array<{ point: number; worker: W }> = [];
  const onRing = new Set<W>();
  const place = (worker: W) => {
    const id = idOf(worker);
    for (let i = 0; i < virtualNodes; i++) ring.push({ point: hash32(`${id}#${i}`), worker });
    onRing.add(worker);
    ring.sort((a, b) => a.point - b.point);
  };
  return {
    name: 'consistent-hash',
    select(candidates: readonly W[], load: LoadView<W>, input: RoutingInput | undefined): W {
      const key = keyOf(input, keyChars);
      if (key === undefined || candidates.length === 1) return leastLoaded(candidates, load);
      for (const worker of candidates) if (!onRing.has(worker)) place(worker);
      const wanted = candidates.length === onRing.size ? undefined : new Set(candidates);
      const h = hash32(key);
      // The first point at or after h, then clockwise to the first worker in rotation.
      let low = 0;
      let high = ring.length;
      while (low < high) {
        const mid = (low + high) >>> 1;
        if ((ring[mid] as { point: number }).point < h) low = mid + 1;
        else high = mid;
      }
      let total = 0;
      for (const worker of candidates) total += load.inFlight(worker);
      const bound = Math.ceil((loadFactor * (total + 1)) / candidates.length);
      for (let step = 0; step < ring.length; step++) {
        const { worker } = ring[(low + step) % ring.length] as { worker: W };
        if ((wanted === undefined || wanted.has(worker)) && load.inFlight(worker) + 1 <= bound) return worker;
      }
      return leastLoaded(candidates, load);
    },
    forget(worker: W): void {
      // A worker that left the pool for good; one back in rotation is placed again, on the same points.
      if (!onRing.delete(worker)) return;
      ring = ring.filter((entry) => entry.worker !== worker);
    },
  };
}

function keyOf(input: RoutingInput | undefined, keyChars: number): string | undefined {
  if (input === undefined) return undefined;
  const session = input.sessionKey;
  if (session !== undefined) return `s\u0000${session}`;
  const text = input.text;
  return text === '' ? undefined : `t\u0000${text.slice(0, keyChars)}`;
}

function positive(value: number, name: string): number {
  if (!Number.isInteger(value) || value < 1) {
    throw new TypeError(`consistentHash: ${name} must be a positive whole number, got ${String(value)}`);
  }
  return value;
}
