import { randomUUID } from 'node:crypto';
import { oneTokenAnswer } from './fake-formats.js';
import type { FakeProtocol } from './fake-protocol.js';

/**
 * SGLang's bootstrap handoff: a prefill call with `bootstrap_room` computes, commits the
 * room's KV and waits for the decode worker of that room to connect to its bootstrap server
 * (this worker's port), then answers; a decode call connects there for its room first. Aborts
 * are seen as SGLang sees them: a prefill aborted while it computes commits nothing, one
 * aborted while it waits for decode frees its KV at once (stranded: computed, never taken),
 * and a decode that leaves the rendezvous takes nothing.
 */
export const fakeSglang: FakeProtocol = {
  name: 'sglang',
  routes: ['/v1/completions', '/v1/chat/completions', '/generate'],
  isPrefillCall: (body) => body.bootstrap_room !== undefined,

  async prefill(worker, res, record, fault) {
    const requestId = record.requestId ?? randomUUID();
    await worker.pause(worker.options.tokenIntervalMs ?? 0);
    if (res.destroyed) return;
    const room = String(record.body.bootstrap_room);
    worker.ledger.commit(room, requestId);
    if (fault?.type === 'never-bootstrap') return; // never answers
    const taken = (await worker.untilDone(res, worker.ledger.whenReleased(room))) === 'claimed';
    if (!taken) {
      // Timed out, or the router aborted this leg: the KV is freed unclaimed at once.
      worker.ledger.strand(room);
      if (!res.destroyed) worker.answerError(res, 500, `bootstrap room ${room} timed out waiting for decode`);
      return;
    }
    await worker.pause(worker.options.transferMs ?? 0);
    if (fault?.type === 'late-failure') {
      await worker.pause(fault.afterMs ?? 0);
      return worker.answerError(res, 500, fault.message ?? 'KV transfer aborted after the bootstrap');
    }
    record.completed = true;
    worker.answerJson(res, 200, oneTokenAnswer(record, worker.options.model));
  },

  kvSource(body) {
    if (body.bootstrap_room === undefined) return undefined;
    return {
      url: `http://${String(body.bootstrap_host)}:${String(body.bootstrap_port)}/fake/bootstrap`,
      payload: { room: String(body.bootstrap_room) },
    };
  },

  endpoints: {
    /** The rendezvous: waits for prefill to commit the room, then takes it. */
    '/fake/bootstrap': async (worker, res, body) => {
      const room = String(body.room);
      const handoff = await worker.untilDone(res, worker.ledger.whenCommitted(room));
      if (handoff !== undefined && !res.destroyed && worker.ledger.claim(room)) {
        worker.answerJson(res, 200, { claimed: room });
      } else if (!res.destroyed) {
        worker.answerError(res, 404, `no prefill committed room ${room}`);
      }
    },
  },
};
