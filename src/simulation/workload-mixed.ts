// `mixed`: two tenants on one fleet, as a shared deployment serves them. An interactive chat
// application (high priority, tight service levels) and a batch of long-context retrieval jobs
// (low priority, loose ones), each arriving as its own workload generates it: bursty chat
// (Splitwise's lengths, BurstGPT's bursts) and RAG (Zipf-popular documents). What a router
// does for each tenant under load, and whether the high-priority one keeps its service while
// the other floods the fleet, is what this workload is for.

import type { TraceRequest } from './trace.js';
import { BURSTY_CHAT } from './workload-chat.js';
import type { WorkloadSettings, WorkloadShape } from './workload-common.js';
import { RAG } from './workload-rag.js';

/** The tenants, their share of the arrivals, and what each asks. */
const TENANTS = [
  { tenant: 'interactive', shape: BURSTY_CHAT, share: 0.9, priority: 1, sloTtftMs: 1000, sloItlMs: 50 },
  { tenant: 'batch', shape: RAG, share: 0.1, priority: 0, sloTtftMs: 10_000, sloItlMs: 200 },
] as const;

/**
 * Added to the second tenant's block hashes: each generator counts its own from 0, and two
 * tenants' prompts share nothing.
 */
const HASH_SPACE = 2 ** 40;

function generate({ seed, requests, ratePerS, tenantRateScale }: WorkloadSettings): TraceRequest[] {
  return TENANTS.flatMap(({ shape, share, ...service }, i) => {
    const rate = ratePerS * share * (tenantRateScale?.[service.tenant] ?? 1);
    return (
      // Each tenant's stream long enough for the mix's first `requests` by arrival: twice its
      // expected share of them, and a hundred more (a Poisson count that far above its mean does
      // not happen at these sizes).
      shape
        // With a tenant's rate scaled, the shares move: each stream long enough to be all of them.
        .generate({
          seed: seed + i,
          requests: tenantRateScale === undefined ? Math.ceil(requests * share * 2) + 100 : requests,
          ratePerS: rate,
        })
        .map((request) => ({
          ...request,
          blocks: i === 0 ? request.blocks : request.blocks.map((hash) => hash + i * HASH_SPACE),
          ...service,
        }))
    );
  });
}

/** The `mixed` workload. */
export const MIXED: WorkloadShape = {
  help: 'two tenants: interactive chat (priority 1; TTFT 1 s, ITL 50 ms) and batch long-context RAG (priority 0; TTFT 10 s, ITL 200 ms), 9 to 1',
  defaultRatePerS: 10,
  tenants: TENANTS.map((each) => each.tenant),
  generate,
};
