import { randomUUID } from 'node:crypto';
import { oneTokenAnswer } from '../../fakes/fake-formats.js';
import type { FakeProtocol } from '../../fakes/fake-protocol.js';

/**
 * SGLang's bootstrap handoff: a prefill call with `bootstrap_room` computes, commits the
 * room's KV and waits for the decode worker of that room to connect to its bootstrap server
 * (this worker's port), then answers; a decode call connects there for its room first. Aborts
 * are seen as SGLang sees them: a prefill aborted while it computes commits nothing, one
 * aborted while it waits for decode frees its KV at once (stranded: computed, never taken),
 * and a decode that leaves the rendezvous takes nothing. `/v1/responses` carries the bootstrap
 * fields (since sglang#35503); `/v1/messages` answers only aggregated calls (see `refuse`).
 */
export const fakeSglang: FakeProtocol = {
  name: 'sglang',
  // Its http_server.py serves the rest (score, classify, tokenize and detokenize beside the
  // generations; count_tokens with its Anthropic adapter), answered here in vLLM's shapes.
  unsupported: {
    pooling: "vLLM's raw pooling API: SGLang's server has no /pooling (its own is /encode)",
  },
  isPrefillCall: (body) => body.bootstrap_room !== undefined,
  refuse(path, body) {
    // As SGLang's serving_chat does: a streamed chat cannot return token ids (its completions can).
    if (path === '/v1/chat/completions' && body.stream === true && body.return_token_ids === true) {
      return 'return_token_ids is not supported with streaming on /v1/chat/completions';
    }
    // Its Anthropic adapter drops the bootstrap fields as it converts the body, so a
    // disaggregated server finds no room: a 400 (in Anthropic's shape, on that route).
    if (path === '/v1/messages' && body.bootstrap_room !== undefined) {
      return 'Invalid request: Disaggregated request received without bootstrap room id.';
    }
    return undefined;
  },

  async prefill(worker, res, record, fault) {
    const requestId = record.requestId ?? randomUUID();
    const cached = await worker.computePrompt(record);
    if (res.destroyed) return;
    // A batched request (several prompts, or n > 1) has a room per element, all on both legs.
    const rooms = roomsOf(record.body);
    for (const room of rooms) worker.ledger.commit(room, requestId, record);
    if (fault?.type === 'never-bootstrap') return; // never answers
    const released = await Promise.all(rooms.map((room) => worker.untilDone(res, worker.ledger.whenReleased(room))));
    const missing = rooms.filter((_, i) => released[i] !== 'claimed');
    if (missing.length > 0) {
      // Timed out, or the router aborted this leg: the KV is freed unclaimed at once.
      for (const room of missing) worker.ledger.strand(room);
      if (!res.destroyed) {
        worker.answerError(res, 500, `bootstrap room ${missing.join(', ')} timed out waiting for decode`);
      }
      return;
    }
    await worker.pause(worker.options.transferMs ?? 0);
    if (fault?.type === 'late-failure') {
      await worker.pause(fault.afterMs ?? 0);
      return worker.answerError(res, 500, fault.message ?? 'KV transfer aborted after the bootstrap');
    }
    record.completed = true;
    const answer = oneTokenAnswer(record, worker.options.model, worker.answerFor(record), cached, { name: 'sglang' });
    worker.answerJson(res, 200, answer);
  },

  kvSources(body) {
    if (body.bootstrap_room === undefined) return [];
    const hosts = body.bootstrap_host;
    const ports = body.bootstrap_port;
    return roomsOf(body).map((room, i) => ({
      url: `http://${String(Array.isArray(hosts) ? hosts[i] : hosts)}:${String(Array.isArray(ports) ? ports[i] : ports)}/fake/bootstrap`,
      payload: { room },
    }));
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

/** The rooms of a request: one, or a list (one per element of a batched request). */
function roomsOf(body: Record<string, unknown>): string[] {
  const room = body.bootstrap_room;
  return Array.isArray(room) ? room.map(String) : [String(room)];
}
