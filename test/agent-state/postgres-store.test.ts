import { createServer, type Socket } from 'node:net';
import pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  type AgentStoreOptions,
  AgentStoreQuotaError,
  AgentStoreUnavailableError,
  objectBytes,
} from '../../src/agent-state/agent-store.js';
import { LOCK_CLASS, PostgresStoreSettingError, SCHEMA_VERSION } from '../../src/agent-state/postgres-schema.js';
import { ownerLockKey } from '../../src/agent-state/postgres-sessions.js';
import { PostgresAgentStore, type PostgresAgentStoreOptions } from '../../src/agent-state/postgres-store.js';
import { POSTGRES_TEST_PASSWORD, postgresTool, startPostgres, type TestPostgres } from '../support/postgres.js';
import { describeStoreContract, responseOf } from './store-contract.js';

const DAY = 24 * 60 * 60 * 1000;

/** A logger that keeps its lines. */
function capture() {
  const lines: Array<{ level: string; fields: object; message: string | undefined }> = [];
  const at = (level: string) => (fields: object, message?: string) => lines.push({ level, fields, message });
  return { lines, logger: { error: at('error'), warn: at('warn'), info: at('info'), debug: at('debug') } };
}

const postgres = postgresTool();
let server: TestPostgres;

beforeAll(async () => {
  if (!postgres.skip) server = await startPostgres();
}, 30_000);
afterAll(async () => {
  await server?.close();
});

const opened: Array<{ close(): Promise<void> }> = [];
afterEach(async () => {
  for (const store of opened.splice(0)) await store.close();
});

/** A store on `url` (a fresh database by default), closed after the test. */
async function open(options: Partial<PostgresAgentStoreOptions> = {}): Promise<PostgresAgentStore> {
  const store = await PostgresAgentStore.open({ url: options.url ?? (await server.database()), ...options });
  opened.push(store);
  return store;
}

/** Runs one statement on `url` as the test's own client. */
async function sql(url: string, text: string, values: unknown[] = []): Promise<Array<Record<string, unknown>>> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return (await client.query(text, values)).rows;
  } finally {
    await client.end();
  }
}

describeStoreContract(
  'PostgresAgentStore',
  async (options: AgentStoreOptions) => {
    const store = await PostgresAgentStore.open({ url: await server.database(), ...options });
    return { store, close: () => store.close() };
  },
  { skip: postgres.skip },
);

describe.skipIf(postgres.skip)(`PostgresAgentStore on a real server (${postgres.why})`, () => {
  it('keeps what it stored across a store closed and opened again, and across a server restart', async () => {
    const url = await server.database();
    const first = await open({ url });
    await first.putResponse(responseOf('resp_1', 'alice'));
    await first.putResponse(responseOf('resp_2', 'alice', 'resp_1'));
    await first.createConversation({ id: 'conv_1', owner: 'alice', createdAt: 1, metadata: {} }, [
      { id: 'msg_1', type: 'message' },
    ]);
    await first.close();
    const again = await open({ url });
    expect((await again.responseChain('resp_2', 'alice', 10))?.responses).toEqual([
      responseOf('resp_1', 'alice'),
      responseOf('resp_2', 'alice', 'resp_1'),
    ]);
    await server.stop();
    await server.start();
    expect(await again.getResponse('resp_2', 'alice')).toEqual(responseOf('resp_2', 'alice', 'resp_1'));
    expect(await again.getItem('conv_1', 'alice', 'msg_1')).toEqual({ id: 'msg_1', type: 'message' });
    expect(await again.usage('alice')).toEqual({
      objects: 4,
      bytes: expect.any(Number),
    });
  });
});

describe.skipIf(postgres.skip)(`PostgresAgentStore's schema (${postgres.why})`, () => {
  it('creates the schema once: a second store opened on the database (another replica) finds it and migrates nothing', async () => {
    const url = await server.database();
    const log = capture();
    const first = await open({ url, logger: log.logger });
    expect(first.schema).toEqual({ from: 0, to: SCHEMA_VERSION });
    expect(log.lines.map((line) => line.message)).toEqual(['Migrated the agent store schema in PostgreSQL']);
    const second = await open({ url, logger: log.logger });
    expect(second.schema).toEqual({ from: SCHEMA_VERSION, to: SCHEMA_VERSION });
    expect(log.lines).toHaveLength(1);
    expect(await sql(url, 'SELECT version FROM disagg_schema_version')).toEqual([{ version: SCHEMA_VERSION }]);
  });

  it('migrates once when replicas start together on an empty database (the advisory lock)', async () => {
    const url = await server.database();
    const stores = await Promise.all(Array.from({ length: 4 }, () => open({ url })));
    expect(stores.map((store) => store.schema.from).sort()).toEqual([
      0,
      SCHEMA_VERSION,
      SCHEMA_VERSION,
      SCHEMA_VERSION,
    ]);
  });

  it('refuses a database at a newer schema version than it knows, in one line saying what to change', async () => {
    const url = await server.database();
    await (await open({ url })).close();
    await sql(url, 'UPDATE disagg_schema_version SET version = $1', [SCHEMA_VERSION + 1]);
    const refused = await open({ url }).catch((error: unknown) => error);
    expect(PostgresStoreSettingError.is(refused) && refused.code).toBe('DISAGG_CONFIG');
    const message = (refused as Error).message;
    expect(message).not.toContain('\n');
    expect(message).toContain(`schema version ${SCHEMA_VERSION + 1}, newer than this disagg knows (${SCHEMA_VERSION})`);
    expect(message).toContain(`127.0.0.1:${server.port}/`);
    expect(message).toContain('point --responses-store at another database');
    // Nothing was changed by the refusal.
    expect(await sql(url, 'SELECT version FROM disagg_schema_version')).toEqual([{ version: SCHEMA_VERSION + 1 }]);
  });
});

describe.skipIf(postgres.skip)(`PostgresAgentStore shared by replicas (${postgres.why})`, () => {
  it("lets two replicas racing for an owner's last slots fill them and no more", async () => {
    const url = await server.database();
    const limits = { maxObjectsPerOwner: 3 };
    const [a, b] = [await open({ url, limits }), await open({ url, limits })];
    const tries = Array.from({ length: 8 }, (_, at) =>
      (at % 2 === 0 ? a : b).putResponse(responseOf(`resp_${at}`, 'alice')),
    );
    const settled = await Promise.allSettled(tries);
    expect(settled.filter((one) => one.status === 'fulfilled')).toHaveLength(3);
    const refused = settled.flatMap((one) => (one.status === 'rejected' ? [one.reason] : []));
    expect(refused.every((error) => AgentStoreQuotaError.is(error))).toBe(true);
    expect(await a.usage('alice')).toEqual(await b.usage('alice'));
    expect((await a.usage('alice')).objects).toBe(3);
    expect(await sql(url, "SELECT count(*)::int AS n FROM disagg_responses WHERE owner = 'alice'")).toEqual([{ n: 3 }]);
  });

  it('gives a response back exactly as stored, its keys in their order and a NUL in a string (text, not jsonb)', async () => {
    const store = await open();
    const response = {
      ...responseOf('resp_t', 'alice'),
      response: { z: 1, a: 'nul \u0000 here', m: [{ b: 2, a: 1 }] },
    };
    await store.putResponse(response);
    expect(JSON.stringify(await store.getResponse('resp_t', 'alice'))).toBe(JSON.stringify(response));
  });

  it('replaces an item given again under an id its conversation holds, in place, as the other backends do', async () => {
    const store = await open();
    await store.createConversation({ id: 'conv_1', owner: 'alice', createdAt: 1, metadata: {} }, [
      { id: 'msg_1', v: 1 },
      { id: 'msg_2', v: 1 },
      { id: 'msg_1', v: 2 },
    ]);
    expect(await store.appendItems('conv_1', 'alice', [{ id: 'msg_3' }, { id: 'msg_2', v: 2 }])).toBe(true);
    expect((await store.listItems('conv_1', 'alice', { limit: 10, order: 'asc' }))?.items).toEqual([
      { id: 'msg_1', v: 2 },
      { id: 'msg_2', v: 2 },
      { id: 'msg_3' },
    ]);
    expect(await store.usage('alice')).toEqual({
      objects: 4,
      bytes:
        objectBytes({ id: 'conv_1', owner: 'alice', createdAt: 1, metadata: {} }) +
        objectBytes({ id: 'msg_1', v: 2 }) +
        objectBytes({ id: 'msg_2', v: 2 }) +
        objectBytes({ id: 'msg_3' }),
    });
    expect(await store.appendItems('conv_1', 'alice', [{ id: 'msg_4' }])).toBe(true);
    expect((await store.listItems('conv_1', 'alice', { limit: 1, order: 'desc' }))?.items).toEqual([{ id: 'msg_4' }]);
  });
});

describe.skipIf(postgres.skip)(`PostgresAgentStore deletes what expired (${postgres.why})`, () => {
  let now = 1_000;
  const clock = () => now;
  const rows = async (url: string) =>
    sql(url, 'SELECT owner, id FROM disagg_responses ORDER BY owner, id').then((all) =>
      all.map((row) => `${row.owner}/${row.id}`),
    );

  it("deletes an owner's expired rows on its next write", async () => {
    now = 1_000;
    const url = await server.database();
    const store = await open({ url, clock, limits: { ttlMs: DAY } });
    await store.putResponse(responseOf('resp_old', 'alice'));
    await store.createConversation({ id: 'conv_old', owner: 'alice', createdAt: 1, metadata: {} }, [{ id: 'msg_1' }]);
    now += DAY + 1;
    await store.putResponse(responseOf('resp_new', 'alice', undefined, now));
    expect(await rows(url)).toEqual(['alice/resp_new']);
    expect(await sql(url, 'SELECT count(*)::int AS n FROM disagg_items')).toEqual([{ n: 0 }]);
    expect(await store.usage('alice')).toEqual({ objects: 1, bytes: expect.any(Number) });
  });

  it('keeps objects for good with a TTL of Infinity, on a clock that gives fractions of a millisecond', async () => {
    now = 1_000.25;
    const store = await open({ clock, limits: { ttlMs: Number.POSITIVE_INFINITY, maxObjectsPerOwner: Infinity } });
    await store.putResponse(responseOf('resp_1', 'alice', undefined, now));
    await store.createConversation({ id: 'conv_1', owner: 'alice', createdAt: 1, metadata: {} }, [{ id: 'msg_1' }]);
    now += 1000 * DAY + 0.5;
    await store.putResponse(responseOf('resp_2', 'alice', 'resp_1', now));
    expect((await store.responseChain('resp_2', 'alice', 10))?.responses.map((one) => one.storedAt)).toEqual([
      1_000.25,
      now,
    ]);
    expect(await store.getItem('conv_1', 'alice', 'msg_1')).toEqual({ id: 'msg_1' });
    expect((await store.usage('alice')).objects).toBe(4);
  });

  it("sweeps every owner's expired rows, started by a write once the sweep interval has passed", async () => {
    now = 1_000;
    const url = await server.database();
    const store = await open({ url, clock, limits: { ttlMs: DAY }, sweepIntervalMs: 0 });
    await store.putResponse(responseOf('resp_a', 'alice'));
    await store.putResponse(responseOf('resp_b', 'bob'));
    now += DAY + 1;
    await store.putResponse(responseOf('resp_c', 'carol', undefined, now));
    await store.close(); // waits for the sweep that write started
    expect(await rows(url)).toEqual(['carol/resp_c']);
    const again = await open({ url, clock, limits: { ttlMs: DAY }, sweepIntervalMs: DAY });
    await again.putResponse(responseOf('resp_b', 'bob', undefined, now));
    now += DAY + 1;
    await again.putResponse(responseOf('resp_d', 'dave', undefined, now));
    // Within the interval: dave's write purged its own rows only.
    expect(await rows(url)).toEqual(['bob/resp_b', 'carol/resp_c', 'dave/resp_d']);
    expect(await again.purgeExpired()).toBe(2);
    expect(await rows(url)).toEqual(['dave/resp_d']);
    expect(await again.usage('bob')).toEqual({ objects: 0, bytes: 0 });
  });
});

/** A TCP server that accepts connections and never answers: a PostgreSQL that hangs. */
async function silentServer() {
  const sockets = new Set<Socket>();
  const silent = createServer((socket) => sockets.add(socket));
  await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
  const { port } = silent.address() as { port: number };
  return {
    port,
    close: async () => {
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => silent.close(resolve));
    },
  };
}

describe.skipIf(postgres.skip)(`PostgresAgentStore through an outage (${postgres.why})`, () => {
  it('fails every call with AgentStoreUnavailableError while the server is down, and works again once it is back', async () => {
    const store = await open({ timeoutMs: 500 });
    await store.putResponse(responseOf('resp_1', 'alice'));
    await server.stop();
    try {
      const calls = [
        store.getResponse('resp_1', 'alice'),
        store.putResponse(responseOf('resp_2', 'alice')),
        store.responseChain('resp_1', 'alice', 10),
        store.listItems('conv_1', 'alice', { limit: 1, order: 'asc' }),
        store.usage('alice'),
      ];
      for (const call of await Promise.allSettled(calls)) {
        expect(call.status).toBe('rejected');
        const error = (call as PromiseRejectedResult).reason;
        expect(AgentStoreUnavailableError.is(error)).toBe(true);
        expect(error.message).toContain(`PostgreSQL at 127.0.0.1:${server.port}/`);
        expect(error.cause).toBeDefined();
      }
    } finally {
      await server.start();
    }
    expect(await store.getResponse('resp_1', 'alice')).toEqual(responseOf('resp_1', 'alice'));
    await store.putResponse(responseOf('resp_2', 'alice'));
    expect((await store.usage('alice')).objects).toBe(2);
  });

  it('fails a write that waits past its timeout (another holds its lock) and leaves nothing of it, then writes again', async () => {
    const url = await server.database();
    const store = await open({ url, timeoutMs: 300 });
    const holder = new pg.Client({ connectionString: url });
    await holder.connect();
    try {
      await holder.query('SELECT pg_advisory_lock($1, $2)', [LOCK_CLASS + 1, ownerLockKey('alice')]);
      const late = await store.putResponse(responseOf('resp_1', 'alice')).catch((error: unknown) => error);
      expect(AgentStoreUnavailableError.is(late)).toBe(true);
      expect((late as Error).message).toMatch(/failed to store a response: did not answer within 300 ms/);
    } finally {
      await holder.end();
    }
    expect(await store.getResponse('resp_1', 'alice')).toBeUndefined();
    await store.putResponse(responseOf('resp_1', 'alice'));
    expect(await store.getResponse('resp_1', 'alice')).toBeDefined();
  });

  it('fails with AgentStoreUnavailableError, not a hang, on a server that accepts and never answers', async () => {
    const silent = await silentServer();
    try {
      const refused = await PostgresAgentStore.open({
        url: `postgres://postgres:${POSTGRES_TEST_PASSWORD}@127.0.0.1:${silent.port}/agents`,
        timeoutMs: 200,
      }).catch((error: unknown) => error);
      expect(AgentStoreUnavailableError.is(refused)).toBe(true);
      expect((refused as Error).message).toContain(
        `PostgreSQL at 127.0.0.1:${silent.port}/agents failed to migrate the schema: did not answer within`,
      );
    } finally {
      await silent.close();
    }
  });

  it('never puts the password in an error message or its description', async () => {
    const log = capture();
    const store = await open({ timeoutMs: 300, logger: log.logger });
    expect(store.description).toBe(
      `postgres://postgres@127.0.0.1:${server.port}/${store.description.split('/').pop()}`,
    );
    const messages: string[] = [];
    const wrong = await PostgresAgentStore.open({
      url: `postgres://postgres:wrong-pw-0815@127.0.0.1:${server.port}/postgres`,
    }).catch((error: unknown) => error);
    expect(AgentStoreUnavailableError.is(wrong)).toBe(true);
    messages.push((wrong as Error).message);
    await server.stop();
    try {
      messages.push((await store.getResponse('resp_1', 'alice').catch((error: Error) => error.message)) as string);
    } finally {
      await server.start();
    }
    expect(messages).toHaveLength(2);
    const logged = JSON.stringify(
      log.lines.map((line) => [line.message, (line.fields as { err?: Error }).err?.message]),
    );
    for (const text of [...messages, logged, store.description]) {
      expect(text).not.toContain(POSTGRES_TEST_PASSWORD);
      expect(text).not.toContain('wrong-pw-0815');
    }
    expect(messages[0]).toContain('password authentication failed');
    expect(logged).toContain('PostgreSQL (the agent store) is unreachable');
  });
});
