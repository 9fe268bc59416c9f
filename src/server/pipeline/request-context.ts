import { randomUUID } from 'node:crypto';
import type { StoredResponse } from '../../agent-state/agent-store.js';
import type { Endpoint } from '../../endpoints/endpoint.js';
import { headerValue } from '../../http/node-server.js';
import type { CompletionUsage } from '../../protocol/llm-engine-output.js';
import { RoutingInput } from '../../routing/routing-input.js';
import { DEFAULT_SESSION_HEADER } from '../../routing/session-affinity.js';
import type { Controller } from '../../runtime/controller.js';
import type { ModelPool } from '../fleet/pool-set.js';
import type { RequestTrace } from '../observability/tracing.js';
import type { Exchange, RequestHeaders } from './exchange.js';
import type { ProxyState } from './proxy-state.js';
import type { RequestEvents } from './request-events.js';

/**
 * The headers coding agents name their session with, in the order they are read when the
 * session header is not set (`--session-header` left at `x-session-id`) and a request does not
 * carry it: Claude Code's `x-claude-code-session-id`, OpenCode's `x-session-affinity`, Codex's
 * `session-id` (and `session_id` before Codex 0.131). Each turn of an agent's session then goes
 * where the turn before it left its prefix, whichever API it speaks.
 */
export const AGENT_SESSION_HEADERS: readonly string[] = Object.freeze([
  'x-claude-code-session-id',
  'x-session-affinity',
  'session-id',
  'session_id',
]);

/**
 * The session key of a request: its `sessionHeader`'s value; with the default header, the
 * first agent session header it carries when it has none.
 */
export function sessionKeyOf(headers: RequestHeaders, sessionHeader: string): string | undefined {
  const own = headerValue(headers[sessionHeader]);
  if (own !== undefined && own !== '') return own;
  if (sessionHeader !== DEFAULT_SESSION_HEADER) return own;
  for (const name of AGENT_SESSION_HEADERS) {
    const value = headerValue(headers[name]);
    if (value !== undefined && value !== '') return value;
  }
  return own;
}

/** The longest client `x-request-id` echoed and logged: a UUID is 36 characters, a trace id 32. */
const MAX_CLIENT_REQUEST_ID = 128;

/**
 * The client's own request id, echoed in `x-request-id` and logged with every line of the
 * request: its header, when at most {@link MAX_CLIENT_REQUEST_ID} printable characters; a
 * longer or stranger one is not taken (the proxy's own id stands for it), since a client would
 * otherwise make every log line of its requests as long as a header may be.
 */
function clientRequestIdOf(headers: RequestHeaders): string | undefined {
  const given = headerValue(headers['x-request-id']);
  return given !== undefined && given.length <= MAX_CLIENT_REQUEST_ID && /^[\x21-\x7e]+$/.test(given)
    ? given
    : undefined;
}

/**
 * What a request's variables hold, keyed by name: empty here, grown by declaration merging by
 * whoever adds a stage (hono's `ContextVariableMap`), so that a stage's value is typed where
 * another reads it.
 *
 * @example
 * declare module 'disagg/server' {
 *   interface RequestVariables { region: string }
 * }
 * const regions: Stage = {
 *   name: 'regions',
 *   run: (request) => {
 *     request.set('region', 'eu'); // typed: a number would not compile
 *     return undefined;
 *   },
 * };
 */
// biome-ignore lint/suspicious/noEmptyInterface: grown by declaration merging
export interface RequestVariables {}

/**
 * The model a request is served as: the name its client sent, the one a rewrite rule sent it
 * as (`rewrites`, canaries), and the base model of a LoRA adapter no pool names.
 */
export interface ResolvedModel {
  /** The body's `model` as the client sent it. */
  readonly requested: unknown;
  /** The model the workers are asked for: `requested`, or a rewrite rule's target. */
  readonly served: unknown;
  /** The base model of `served` when it is an adapter (the decode workers' `/v1/models` say), else undefined. */
  readonly base: string | undefined;
}

/**
 * What a request's answer said, once the host has it: the id it carried (Responses'), what it
 * used, and the workers that served it. Stages' `after` hooks read it (the Responses bookkeeping,
 * a tenant's tokens).
 */
export interface RequestAnswer {
  /** The answer's id, for an API whose answers are asked for again (Responses'). */
  readonly id?: string | undefined;
  /** The decode worker that served the answer, when the host knows it. */
  readonly decodeWorker?: { url: string } | undefined;
}

/**
 * What keeps a request's answer (the Responses store): the answer object as the client gets it,
 * and its keeping, before the answer's end reaches the client, so that a client continuing from
 * it at once finds it.
 */
export interface AnswerKeeper {
  /**
   * The answer object as the client gets it: the worker's, saying what the client asked of the
   * router (Responses' `store`, `background`, `previous_response_id`, `conversation`: the
   * workers were asked to keep nothing).
   */
  restate(response: Record<string, unknown>): Record<string, unknown>;
  /** Keeps the answer; its end waits for it, and a rejection fails the answer instead of ending it. */
  keep(response: Record<string, unknown>): Promise<void>;
}

/**
 * One request as the pipeline's stages see it, whatever transport it came by (the proxy's HTTP
 * server, the endpoint picker's ext_proc stream, a library router's): who sent it for which
 * endpoint, its body once read, the model and pool it resolved to, whose it is, what its routing
 * reads, and what serving it found out (the usage the answer reported, the failure answered). The
 * routing input is built once and the prompt tokenized at most once, however many stages ask (a
 * tenant's tokens-per-minute and a KV-aware policy both want the ids).
 *
 * @internal
 */
export class RequestContext<X extends Exchange = Exchange> {
  /**
   * The workers' id of the request: one of its own for every request (two clients reusing an
   * id must not meet inside an engine); the client gets its own id back.
   */
  readonly requestId = randomUUID();
  readonly clientRequestId: string | undefined;
  readonly started = performance.now();
  /** The body, once the parse stage has read and checked it. */
  body: Record<string, unknown> = {};
  /** The body's `model` as its client sent it, once parsed (a rewrite then changes `body.model`). */
  requestedModel: unknown;
  /** The request's tenant, once admitted (see `--tenants-file`). */
  tenant: string | undefined;
  /** The request's answer will be metered: every answer must say what it used (a tenant's token limit). */
  usageNeeded = false;
  /** What the workers said the request used, once answered. */
  usage: CompletionUsage | undefined;
  /** What the answer said, once the host has it. */
  answer: RequestAnswer | undefined;
  /**
   * The P/D decider's verdict, once the prepare stage asked it: the reason to serve on decode
   * alone, or undefined to disaggregate.
   */
  verdict: string | undefined;
  /** The failure the request was answered with, if any. */
  failure: unknown;
  /**
   * The answer's id as the answer-id stage settled it (Responses'), and whether the client
   * named it (else it is the router's own, random).
   */
  answerId: { readonly id: string; readonly given: boolean } | undefined;
  /**
   * The session a stored chain belongs to (its first response's id, or its conversation's):
   * routing's session key when the request names none, so that each turn goes where the turns
   * before it left their prefix.
   */
  chainSession: string | undefined;
  /** What keeps the request's answer (the Responses store), once its stage set it. */
  keeper: AnswerKeeper | undefined;
  /**
   * A background Responses turn (`background: true`), as its stage settled it: whether the
   * client follows its stream, and its record as queued. The host runs it without the client.
   */
  background: { readonly clientStreams: boolean; readonly queued: StoredResponse } | undefined;
  /** The request's context (a client that leaves stops it), once it is tracked. */
  context: Controller | undefined;
  /** Its events, once it is tracked. */
  events: RequestEvents | undefined;
  /** Its trace, when tracing records or the client sent a `traceparent`. */
  trace: RequestTrace | undefined;
  #input: RoutingInput | undefined;
  #pool: { of: ModelPool | undefined } | undefined;
  #tokenIds: Promise<readonly number[] | undefined> | undefined;
  readonly #variables = new Map<keyof RequestVariables, unknown>();

  constructor(
    readonly proxy: ProxyState,
    readonly endpoint: Endpoint,
    readonly exchange: X,
  ) {
    this.clientRequestId = clientRequestIdOf(exchange.headers);
    exchange.setHeader('x-request-id', this.clientRequestId ?? this.requestId);
  }

  /** The request's headers, as its transport gave them. */
  get headers(): RequestHeaders {
    return this.exchange.headers;
  }

  /** A variable a stage set for the request; undefined before. */
  get<K extends keyof RequestVariables>(name: K): RequestVariables[K] | undefined {
    return this.#variables.get(name) as RequestVariables[K] | undefined;
  }

  /** Sets a variable for the stages after this one (and its `after` hooks). */
  set<K extends keyof RequestVariables>(name: K, value: RequestVariables[K]): void {
    this.#variables.set(name, value);
  }

  /** The model the request is served as, once the resolve stage ran (before: what the body says). */
  get model(): ResolvedModel {
    const served = this.body.model;
    const base = this.proxy.models.baseOf?.(served);
    return { requested: this.requestedModel ?? served, served, base: base === served ? undefined : base };
  }

  /**
   * The pool that serves the body's `model` (its engine, workers and scheduler), chosen once;
   * undefined when no pool serves it (the resolve stage answers a 404 `model_not_found` then,
   * so a handler past it always has one). A sidecar's generation request has a pool of its own:
   * the prefill worker its header names and the model's decode workers.
   *
   * @throws {PrefillTargetError} (once, from the resolve stage) for a sidecar's request whose
   *   header names a prefill worker outside the allow-list.
   */
  get pool(): ModelPool | undefined {
    if (this.#pool === undefined) {
      const { pools, models, prefillTargets } = this.proxy;
      const { model } = this.body;
      // A LoRA adapter no pool names is served by the pool of its base model.
      const pool = pools.namedFor(model) ?? pools.namedFor(models.baseOf?.(model)) ?? pools.poolFor(model);
      const own = pool !== undefined && prefillTargets !== undefined && this.endpoint.serving === 'disaggregated';
      this.#pool = { of: own ? prefillTargets.poolFor(pool, this.headers) : pool };
    }
    return this.#pool.of;
  }

  /** The request's session key, as routing reads it (its session header, an agent's, or the body's `user`), without building the routing input. */
  get sessionKey(): string | undefined {
    const own = sessionKeyOf(this.headers, this.proxy.options.routing.sessionHeader) ?? this.chainSession;
    if (own !== undefined && own !== '') return own;
    const { user } = this.body;
    return typeof user === 'string' && user !== '' ? user : undefined;
  }

  /**
   * The request as routing policies see it (its text, session key and token ids): built once;
   * a prefix key header stands in for the prompt's text; the session key is the session
   * header's, or an agent's own (see {@link AGENT_SESSION_HEADERS}).
   */
  get input(): RoutingInput {
    const { sessionHeader, prefixKeyHeader } = this.proxy.options.routing;
    this.#input ??= new RoutingInput(
      this.body,
      sessionKeyOf(this.headers, sessionHeader) ?? this.chainSession,
      undefined,
      this.endpoint,
      headerValue(this.headers[prefixKeyHeader]),
    );
    return this.#input;
  }
  /**
   * The prompt's token ids: the body's own, else the router's tokenizer's (`--tokenizer`,
   * tokenized once, off the event loop), which the routing input then holds too; undefined
   * without either.
   */
  promptTokenIds(): Promise<readonly number[] | undefined> {
    this.#tokenIds ??= (async () => {
      const { input } = this;
      if (input.tokenIds !== undefined) return input.tokenIds;
      const ids = await this.proxy.tokenize(this.body, this.endpoint);
      if (ids !== undefined) input.tokenized(ids);
      return ids;
    })();
    return this.#tokenIds;
  }

  /**
   * The prompt's token ids when something has asked for them already (a policy that routes on
   * tokens, a tenant's token limit), without tokenizing: undefined when nothing has.
   */
  countedTokenIds(): Promise<readonly number[] | undefined> | undefined {
    return this.#tokenIds;
  }

  /** The request's tokens before it is served: its prompt's by the tokenizer, else a quarter of its text. */
  async estimatedTokens(): Promise<number> {
    const ids = await this.promptTokenIds();
    return ids?.length ?? Math.ceil(this.input.promptText.length / 4);
  }
}
