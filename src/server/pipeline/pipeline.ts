import type { Endpoint } from '../../endpoints/endpoint.js';
import type { EndpointName } from '../../endpoints/registry.js';
import { admitStage } from './admit-stage.js';
import { openStage, parseStage, resolveStage } from './body-stages.js';
import type { Exchange } from './exchange.js';
import { prepareStage } from './prepare-stage.js';
import type { RequestStage, Stage } from './stage.js';
import { statelessTurnStage } from './stateless-turn-stage.js';

/**
 * The hosts that run the pipeline: the proxy (`disagg serve`, the fastify plugin, the web
 * handler), which then serves the request through the flow, and the endpoint picker (`disagg
 * epp`), which then answers the gateway with the workers it picked.
 */
export type PipelineHost = 'proxy' | 'picker';

/**
 * Each endpoint's stages of its own on a host, run after its model and pool are resolved and
 * before admission: one line per endpoint. The proxy's are the server's
 * (`server/endpoint-stages.ts`: Responses' answer id and its stored turn, whose `after` needs
 * the answer itself); the picker never reads an answer, so it keeps no state and refuses a
 * Responses turn that needs some ({@link PICKER_ENDPOINT_STAGES}).
 */
export type EndpointStageTable<X extends Exchange = Exchange> = Partial<
  Record<EndpointName, readonly RequestStage<X>[]>
>;

/** The endpoint picker's endpoint stages: a Responses turn must carry its whole state. */
export const PICKER_ENDPOINT_STAGES: EndpointStageTable = {
  responses: [statelessTurnStage],
};

/** What a host adds to the shared stages: its own, where they go. */
export interface HostStages<X extends Exchange> {
  /** Stages of the library user's (`addStage`), run once the request is admitted. */
  readonly added?: readonly Stage[] | undefined;
  /** The host's own, run after those and before `prepare` (the proxy's tracking). */
  readonly own?: readonly RequestStage<X>[] | undefined;
  /** The endpoints' stages the host runs; the picker's ({@link PICKER_ENDPOINT_STAGES}) when it gives none. */
  readonly endpoints?: EndpointStageTable<X> | undefined;
}

/**
 * The stages of a request of `endpoint` on `host`, in order: the router is open, the body is
 * read and checked, the model and pool resolved, the endpoint's own stages, the tenant admitted,
 * the stages added by the library user, the host's own (the proxy's tracking), then `prepare`
 * (tokens, session bindings, the P/D verdict) for the decision that follows.
 *
 * @example
 * pipelineStages(endpointNamed('completions'), 'picker').map((stage) => stage.name);
 * // ['open', 'parse', 'resolve', 'admit', 'prepare']
 */
export function pipelineStages<X extends Exchange>(
  endpoint: Endpoint,
  host: PipelineHost,
  { added = [], own = [], endpoints }: HostStages<X> = {},
): readonly RequestStage<X>[] {
  const table = endpoints ?? (host === 'picker' ? (PICKER_ENDPOINT_STAGES as EndpointStageTable<X>) : {});
  const endpointStages = table[endpoint.name as EndpointName] ?? [];
  return [
    openStage,
    parseStage,
    resolveStage,
    ...endpointStages,
    admitStage,
    ...added,
    ...own,
    prepareStage,
  ] as readonly RequestStage<X>[];
}
