import type { Redis, RedisOptions } from 'ioredis';

/**
 * A client of the Redis the replicas share, as their pieces use it: `ioredis` loaded on first
 * use, connecting in the background (a Redis down at start is a Redis down, as later), failing
 * fast while disconnected (no queue behind a reconnect, no retry of a command) within
 * `timeoutMs`, its errors reported by each call rather than as the client's own, and `scripts`
 * defined as commands. `connected` settles once the first connection is over, ready or failed:
 * the first call waits for it (bounded by the timeout) so that starting is not a Redis down.
 *
 * @internal
 */
export function sharedRedis(
  url: string,
  timeoutMs: number,
  scripts: Readonly<Record<string, { keys: number; lua: string }>>,
): { redis: Promise<Redis>; connected: Promise<void> } {
  let connected: Promise<void> = Promise.resolve();
  const redis = import('ioredis').then(({ Redis: Client }) => {
    const settings: RedisOptions = {
      lazyConnect: true,
      enableOfflineQueue: false,
      maxRetriesPerRequest: 0,
      commandTimeout: timeoutMs,
      connectTimeout: Math.max(timeoutMs, 250),
      retryStrategy: (times) => Math.min(50 * times, 1000),
    };
    const client = new Client(url, settings);
    client.on('error', () => {});
    connected = client.connect().catch(() => {});
    for (const [name, { keys, lua }] of Object.entries(scripts))
      client.defineCommand(name, { numberOfKeys: keys, lua });
    return client;
  });
  // Read once the client exists, when its first connection has been asked for.
  return { redis, connected: redis.then(() => connected) };
}
