import { describe, expect, it } from 'vitest';
import { AgentState } from '../../src/agent-state/agent-state.js';
import { type AgentStore, AgentStoreUnavailableError } from '../../src/agent-state/agent-store.js';
import { MemoryAgentStore } from '../../src/agent-state/memory-store.js';
import { DisaggError } from '../../src/util/disagg-error.js';
import { recordingLogger } from '../support/async.js';

describe('AgentState: the router’s store, opened once', () => {
  it('opens a server store at start and says where it keeps things; memory needs no start', async () => {
    const { logger, records } = recordingLogger();
    let opened = 0;
    const open = async () => {
      opened++;
      return new MemoryAgentStore();
    };
    await new AgentState({ store: 'memory', limits: {}, logger, open }).open();
    expect(opened).toBe(0);
    const state = new AgentState({ store: 'redis://redis:6379', limits: {}, logger, open });
    await state.open();
    expect(opened).toBe(1);
    expect(await state.store()).toBe(await state.store());
    expect(opened).toBe(1);
    expect(
      records.some((record) => record.message === 'Stored Responses and Conversations are kept in the store given'),
    ).toBe(true);
    await state.close();
  });

  it('a store unreachable at start is a warning, each request a 503 meanwhile, and the next request tries again', async () => {
    const { logger, records } = recordingLogger();
    let attempts = 0;
    const open = async (): Promise<AgentStore> => {
      attempts++;
      if (attempts < 3) throw new Error('connect ECONNREFUSED');
      return new MemoryAgentStore();
    };
    const state = new AgentState({ store: 'postgres://db/x', limits: {}, logger, open });
    await state.open();
    expect(records.filter((record) => record.level === 'warn')).toHaveLength(1);
    const failed = await state.store().catch((error: unknown) => error);
    expect(AgentStoreUnavailableError.is(failed)).toBe(true);
    expect(await state.store()).toBeInstanceOf(MemoryAgentStore);
    expect(attempts).toBe(3);
    await state.close();
  });

  it('a mistake no retry mends (DISAGG_CONFIG) stops the start', async () => {
    const open = async (): Promise<AgentStore> => {
      throw new DisaggError('DISAGG_CONFIG', 'the database has schema version 9, newer than this disagg knows');
    };
    const state = new AgentState({ store: 'postgres://db/x', limits: {}, open });
    await expect(state.open()).rejects.toThrow(/newer than this disagg knows/);
  });

  it('after close, the store is unavailable', async () => {
    const state = new AgentState({ store: 'memory', limits: {} });
    await state.store();
    await state.close();
    expect(AgentStoreUnavailableError.is(await state.store().catch((error: unknown) => error))).toBe(true);
  });
});
