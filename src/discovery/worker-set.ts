import type { Logger } from '../runtime/logger.js';

/** A pool a discovery source fills. */
export type DiscoveryRole = 'prefill' | 'decode';

/** A worker as a discovery source sees it: its base URL and, for SGLang, its bootstrap server. */
export interface DiscoveredWorker {
  url: string;
  /**
   * What the proxy should call it (Kubernetes: the pod's name, `<pod>:<port>` for a pod of
   * several workers), so that metrics, logs and the admin API name what `kubectl` shows; a
   * generated name (`prefill-3`) without one, or when another worker has it.
   */
  name?: string | undefined;
  bootstrapHost?: string | undefined;
  bootstrapPort?: number | undefined;
  /** Where its engine publishes its KV cache events, and answers replays (ZMQ endpoints). */
  kvEvents?: string | undefined;
  kvEventsReplay?: string | undefined;
  /** Its labels (a pod's), which the proxy reads into the worker's attributes; none from DNS. */
  labels?: Readonly<Record<string, string>> | undefined;
}

/**
 * What a discovery source changes: the proxy's membership (or a test's stand-in). `current`
 * lists what this source put in the pool (draining ones included, so that a worker that is
 * leaving is not added a second time); `add` may refuse (a worker already there) by throwing.
 */
export interface MembershipTarget {
  current(role: DiscoveryRole): ReadonlyArray<{ url: string; draining: boolean }>;
  add(role: DiscoveryRole, worker: DiscoveredWorker): Promise<unknown>;
  drain(role: DiscoveryRole, url: string): void;
}

/**
 * Brings `role`'s pool to what a source found: workers found and not in the pool are added,
 * workers of this source no longer found drain (requests under way finish). One that is
 * draining and found again is left to finish leaving and added on a later round. An add that
 * fails is logged and tried again on the next round.
 *
 * Resolves when every add has settled; never rejects.
 */
export async function reconcile(
  target: MembershipTarget,
  role: DiscoveryRole,
  found: readonly DiscoveredWorker[],
  logger: Logger,
): Promise<{ added: number; drained: number }> {
  const wanted = new Map(found.map((worker) => [worker.url, worker]));
  const current = target.current(role);
  const have = new Set(current.map((worker) => worker.url));
  let drained = 0;
  for (const worker of current) {
    if (worker.draining || wanted.has(worker.url)) continue;
    target.drain(role, worker.url);
    drained += 1;
  }
  const adds = [...wanted.values()]
    .filter((worker) => !have.has(worker.url))
    .map((worker) =>
      target.add(role, worker).then(
        () => 1,
        (error: unknown) => {
          logger.warn(
            { err: error, role, worker: worker.name, url: worker.url },
            'A discovered worker could not be added; trying again next round',
          );
          return 0;
        },
      ),
    );
  const added = (await Promise.all(adds)).reduce<number>((sum, one) => sum + one, 0);
  return { added, drained };
}
