// `bursty-chat`: single-turn chat behind a few applications' system prompts, arriving in
// bursts. Where its shape comes from:
// - Lengths: Splitwise (Patel et al., ISCA 2024) on Azure's LLM inference trace 2023: the
//   conversation service's prompts have a median of 1,020 tokens and its answers 129, both
//   long-tailed; here a lognormal system prompt (median 300) plus a lognormal user turn
//   (median 700), and a lognormal answer (median 129).
// - Arrivals: BurstGPT (Wang et al., 2024, Azure OpenAI service logs) reports chat arrivals
//   burstier than a Poisson process; here a two-state Markov-modulated Poisson process, calm
//   for 20 s on average and then a burst at 4x the calm rate for 5 s on average, scaled so the
//   long-run mean is the rate asked for.
// - Reuse: only a system prompt's full blocks recur (a prefix cache holds whole blocks), so
//   little of a prompt is reusable; multi-turn chat, where a conversation's history recurs, is
//   what `agent-sessions` models.

import type { TraceRequest } from './trace.js';
import { BlockHasher, type Segment } from './workload-blocks.js';
import type { WorkloadSettings, WorkloadShape } from './workload-common.js';
import { SeededRandom, Zipf } from './workload-random.js';

const APPLICATIONS = 8;
const CALM_MEAN_S = 20;
const BURST_MEAN_S = 5;
const BURST_FACTOR = 4;

/** The share of time in the burst state, in the long run. */
const BURST_SHARE = BURST_MEAN_S / (CALM_MEAN_S + BURST_MEAN_S);

function generate({ seed, requests, ratePerS }: WorkloadSettings): TraceRequest[] {
  const random = new SeededRandom(seed);
  const hasher = new BlockHasher();
  const systems: Segment[] = [];
  for (let i = 0; i < APPLICATIONS; i++) systems.push(hasher.segment(random.tokens(300, 0.8, 32, 2048)));
  const popularity = new Zipf(APPLICATIONS, 1);
  // The calm rate such that the time-weighted mean of both states is the rate asked for.
  const calmPerMs = ratePerS / 1000 / (1 - BURST_SHARE + BURST_SHARE * BURST_FACTOR);
  let burst = random.chance(BURST_SHARE);
  let stateEnds = random.exponential((burst ? BURST_MEAN_S : CALM_MEAN_S) * 1000);
  let now = 0;
  const out: TraceRequest[] = [];
  while (out.length < requests) {
    // A Poisson process has no memory: a gap cut short by a change of state is drawn afresh.
    const gap = random.exponential(1 / (burst ? calmPerMs * BURST_FACTOR : calmPerMs));
    if (now + gap > stateEnds) {
      now = stateEnds;
      burst = !burst;
      stateEnds = now + random.exponential((burst ? BURST_MEAN_S : CALM_MEAN_S) * 1000);
      continue;
    }
    now += gap;
    const system = systems[popularity.draw(random)] as Segment;
    const prompt = [system, hasher.segment(random.tokens(700, 1, 4, 16_000))];
    out.push({
      arrivalMs: now,
      inputTokens: system.tokens + (prompt[1] as Segment).tokens,
      outputTokens: random.tokens(129, 1, 1, 4096),
      blocks: hasher.blocks(prompt),
    });
  }
  return out;
}

/** `bursty-chat`, as the registry lists it. */
export const BURSTY_CHAT: WorkloadShape = {
  help: 'single-turn chat behind a few system prompts, arriving in bursts (calm 20 s, 4x bursts of 5 s); Azure-like lengths',
  defaultRatePerS: 10,
  generate,
};
