import { expect, it, vi } from 'vitest';
import { AgentStoreUnavailableError } from '../../src/agent-state/agent-store.js';
import { PostgresAgentStore } from '../../src/agent-state/postgres-store.js';

// As an install with --omit=optional: `pg` cannot be loaded.
vi.mock('pg', () => {
  throw new Error("Cannot find package 'pg'");
});

it('says which package to install when the optional dependency pg is missing', async () => {
  const refused = await PostgresAgentStore.open({ url: 'postgres://disagg:secret@127.0.0.1:5432/agents' }).catch(
    (error: unknown) => error,
  );
  expect(AgentStoreUnavailableError.is(refused)).toBe(true);
  expect((refused as Error).message).toBe(
    'the PostgreSQL agent store needs the optional dependency pg: npm install pg@8',
  );
  expect((refused as Error).cause).toBeDefined();
});
