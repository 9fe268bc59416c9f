import { type AgentStore, checkQuota, type JsonObject } from '../../agent-state/agent-store.js';
import type { RequestContext } from '../pipeline/request-context.js';
import { type RequestStage, refusalOf } from '../pipeline/stage.js';
import { StoredObjectError, shortId } from './agent-errors.js';
import { ownerLimits } from './agent-state-of.js';
import { ownerOf } from './owner.js';
import { inputItems, outputItems, withId } from './turn-items.js';

/** The most responses a `previous_response_id` chain may hold: past it, a conversation is the way. */
export const MAX_CHAIN_TURNS = 1000;

/** The most items a conversation may bring into one turn. */
export const MAX_CONVERSATION_ITEMS = 10_000;

/** A Responses body's `conversation`: an id, or `{ id }`; undefined for none. */
export function conversationIdOf(value: unknown): string | undefined {
  if (typeof value === 'string' && value !== '') return value;
  if (typeof value === 'object' && value !== null && typeof (value as { id?: unknown }).id === 'string') {
    return (value as { id: string }).id;
  }
  return undefined;
}

/**
 * The Responses API's state, kept by the router so that the engines stay stateless and any
 * replica answers any turn: a turn continuing `previous_response_id` is sent with the whole
 * chain before its input (each earlier turn's input items, then its output items: messages,
 * tool calls, reasoning with its encrypted content, exactly as stored), a turn in a
 * `conversation` with the conversation's items; `instructions` are the turn's own, never
 * carried over (as OpenAI defines them). The workers get `store: false` and neither field.
 *
 * With `store` (true unless the client says false) the answer is kept before its end reaches
 * the client, with the turn's input items (`GET /v1/responses/{id}`, `/input_items`); a
 * conversation gets the turn's input and output items. The chain's first response (or the
 * conversation) is the turn's session, so routing keeps the turns where their prefix is.
 *
 * Refused before any worker: an unknown (or another owner's) `previous_response_id` (400
 * `previous_response_not_found`), another owner's `conversation` (404), both at once, a
 * `background` turn not stored, a client's own `request_id` on a stored turn (the router names
 * stored responses: a client's id could take another's), the owner at its quota (429), the
 * store unreachable (503).
 *
 * @internal
 */
export const storedTurnStage: RequestStage = {
  name: 'stored-turn',
  run: async (request) => {
    const { proxy, body } = request;
    const previous = typeof body.previous_response_id === 'string' ? body.previous_response_id : undefined;
    const conversation = conversationIdOf(body.conversation);
    const storing = body.store !== false;
    try {
      checkFields(request, previous, conversation, storing);
      if (!storing && previous === undefined && conversation === undefined) {
        request.body = withoutStateFields(body, body.input);
        return undefined;
      }
      const owner = ownerOf(proxy, request.headers);
      const store = await proxy.agents.store();
      const prior = await priorItems(store, owner, previous, conversation);
      // A turn the owner's quota cannot hold is refused before it costs a worker anything.
      if (storing) checkQuota(owner, await store.usage(owner), { objects: 1, bytes: 0 }, ownerLimits(proxy.options));
      const input = inputItems(body.input);
      request.body = withoutStateFields(
        body,
        prior.items === undefined ? body.input : [...prior.items, ...clientItems(body.input)],
      );
      request.chainSession = prior.root ?? request.answerId?.id;
      const background = body.background === true;
      if (background) {
        if (request.exchange.detach === undefined) {
          throw new StoredObjectError(400, 'background', 'This router cannot run a response in the background');
        }
        request.background = {
          clientStreams: body.stream === true,
          queued: {
            id: request.answerId?.id as string,
            owner,
            storedAt: Date.now(),
            previousResponseId: previous,
            conversationId: conversation,
            input,
            response: queuedResponse(request.answerId?.id as string, body, previous, conversation),
          },
        };
        // The run reads the events, whatever the client asked: they are what a resumed stream replays.
        request.body = { ...request.body, stream: true };
        request.exchange.detach();
      }
      const restate = (response: JsonObject): JsonObject => {
        const restated: JsonObject = {
          ...response,
          store: storing,
          background,
          previous_response_id: previous ?? null,
        };
        if (conversation !== undefined) restated.conversation = { id: conversation };
        return restated;
      };
      request.keeper = {
        restate,
        keep: async (response) => {
          const id = typeof response.id === 'string' ? response.id : (request.answerId?.id as string);
          if (storing) {
            await store.putResponse({
              id,
              owner,
              storedAt: Date.now(),
              previousResponseId: previous,
              conversationId: conversation,
              input,
              response: restate(response),
            });
          }
          if (conversation !== undefined) {
            await store.appendItems(conversation, owner, [...input, ...outputItems(response).map(withId)]);
          }
        },
      };
      return undefined;
    } catch (error) {
      return refusalOf(request, error);
    }
  },
};

function checkFields(
  request: RequestContext,
  previous: string | undefined,
  conversation: string | undefined,
  storing: boolean,
): void {
  const { body } = request;
  if (previous !== undefined && conversation !== undefined) {
    throw new StoredObjectError(
      400,
      'conversation',
      "Mutually exclusive parameters: send only one of 'previous_response_id' or 'conversation'",
    );
  }
  if (body.background === true && !storing) {
    throw new StoredObjectError(
      400,
      'background',
      'A background response is polled from the store: it needs store: true',
    );
  }
  if (storing && request.answerId?.given === true) {
    throw new StoredObjectError(
      400,
      'request_id',
      'The router names the responses it stores: leave request_id out, or send store: false',
    );
  }
}

/** What the turn continues: the chain's or the conversation's items, oldest first, and its session. */
async function priorItems(
  store: AgentStore,
  owner: string,
  previous: string | undefined,
  conversation: string | undefined,
): Promise<{ items?: JsonObject[]; root?: string }> {
  if (previous !== undefined) {
    const chain = await store.responseChain(previous, owner, MAX_CHAIN_TURNS);
    if (chain === undefined) {
      throw new StoredObjectError(
        400,
        'previous_response_id',
        `Previous response with id '${shortId(previous)}' not found.`,
        'previous_response_not_found',
      );
    }
    if (!chain.complete) {
      throw new StoredObjectError(
        400,
        'previous_response_id',
        `The chain of '${shortId(previous)}' is longer than ${MAX_CHAIN_TURNS} responses: continue it in a conversation`,
      );
    }
    return {
      items: chain.responses.flatMap((response) => [...response.input, ...outputItems(response.response)]),
      root: chain.responses[0]?.id,
    };
  }
  if (conversation === undefined) return {};
  if ((await store.getConversation(conversation, owner)) === undefined) {
    throw new StoredObjectError(404, 'conversation', `Conversation with id '${shortId(conversation)}' not found.`);
  }
  const items: JsonObject[] = [];
  let after: string | undefined;
  for (;;) {
    const page = await store.listItems(conversation, owner, { after, limit: 1000, order: 'asc' });
    if (page === undefined) break;
    items.push(...page.items);
    if (!page.hasMore || page.items.length === 0) break;
    if (items.length > MAX_CONVERSATION_ITEMS) {
      throw new StoredObjectError(
        400,
        'conversation',
        `Conversation '${shortId(conversation)}' holds more than ${MAX_CONVERSATION_ITEMS} items: start a new one`,
      );
    }
    after = page.items[page.items.length - 1]?.id as string | undefined;
  }
  return { items, root: conversation };
}

/** A background response as it is answered and stored before it runs: `queued`, with what the request said of it. */
function queuedResponse(
  id: string,
  body: Record<string, unknown>,
  previous: string | undefined,
  conversation: string | undefined,
): JsonObject {
  return {
    id,
    object: 'response',
    created_at: Math.floor(Date.now() / 1000),
    status: 'queued',
    background: true,
    store: true,
    model: body.model ?? null,
    instructions: body.instructions ?? null,
    max_output_tokens: body.max_output_tokens ?? null,
    metadata: body.metadata ?? {},
    previous_response_id: previous ?? null,
    ...(conversation === undefined ? {} : { conversation: { id: conversation } }),
    tools: body.tools ?? [],
    output: [],
    usage: null,
    error: null,
    incomplete_details: null,
  };
}

/** The client's input as items, as it sent them (a text: one user message). */
function clientItems(input: unknown): unknown[] {
  if (typeof input === 'string') return [{ type: 'message', role: 'user', content: input }];
  return Array.isArray(input) ? input : [];
}

/** The body the workers get: the input given, nothing stored, nothing of the router's state. */
function withoutStateFields(body: Record<string, unknown>, input: unknown): Record<string, unknown> {
  const { previous_response_id: _p, conversation: _c, background: _b, ...rest } = body;
  return { ...rest, input, store: false };
}
