import type { Endpoint } from '../../endpoints/endpoint.js';
import type { EndpointName } from '../../endpoints/registry.js';
import { admitStage } from './admit-stage.js';
import { answerIdStage } from './answer-id-stage.js';
import { openStage, parseStage, resolveStage } from './body-stages.js';
import type { Exchange } from './exchange.js';
import { prepareStage } from './prepare-stage.js';
import type { RequestStage, Stage } from './stage.js';

/**
 * The hosts that run the pipeline: the proxy (`disagg serve`, the fastify plugin, the web
 * handler), which then serves the request through the flow, and the endpoint picker (`disagg
 * epp`), which then answers the gateway with the workers it picked.
 */
export type PipelineHost = 'proxy' | 'picker';

/** An endpoint's stages of its own, and the hosts that run them. */
export interface EndpointStages {
  readonly stages: readonly RequestStage[];
  /**
   * The hosts that run them. A stage whose `after` needs the answer itself (its id, its body)
   * runs in the proxy alone: the picker never reads an answer.
   */
  readonly hosts: readonly PipelineHost[];
}

/**
 * Each endpoint's stages of its own, run after its model and pool are resolved and before
 * admission: one line per endpoint (Responses settles its answer's id, and remembers which
 * worker holds the answer).
 */
export const ENDPOINT_STAGES: Partial<Record<EndpointName, EndpointStages>> = {
  responses: { stages: [answerIdStage], hosts: ['proxy'] },
};

/** What a host adds to the shared stages: its own, where they go. */
export interface HostStages<X extends Exchange> {
  /** Stages of the library user's (`addStage`), run once the request is admitted. */
  readonly added?: readonly Stage[] | undefined;
  /** The host's own, run after those and before `prepare` (the proxy's tracking). */
  readonly own?: readonly RequestStage<X>[] | undefined;
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
  { added = [], own = [] }: HostStages<X> = {},
): readonly RequestStage<X>[] {
  const ofEndpoint = ENDPOINT_STAGES[endpoint.name as EndpointName];
  const endpointStages = ofEndpoint?.hosts.includes(host) === true ? ofEndpoint.stages : [];
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
