// `agent-sessions`: multi-turn agent sessions, each turn a model call whose prompt is the whole
// session so far. Where its shape comes from:
// - Mooncake's FAST'25 tool-and-agent trace (kvcache-ai/Mooncake, FAST25-release/README.md:
//   23,608 requests in an hour, 8,596 prompt tokens and 182 answer tokens on average): a few
//   agents' long system prompts (instructions and tool schemas, lognormal around 3,000 tokens)
//   shared by all their sessions, short answers (lognormal, median 120 tokens: mostly tool
//   calls).
// - The tool loop as coding agents run it: each turn's prompt is the previous prompt, the
//   previous answer and then a tool's output (lognormal, median 450 tokens, long-tailed: file
//   reads and test logs) or, one turn in seven or so, the user's next message; about 8 turns a
//   session (geometric), ended early when the prompt passes 120,000 tokens (the default
//   profile's context holds 128k).
// - Gaps between turns: the previous answer's decoding at a nominal 50 tokens/s (a recorded
//   trace holds the time the answer took), then the tool's run (lognormal, median 1.5 s) or
//   the user's reading and typing (lognormal, median 15 s).
// - Sessions start as a Poisson process at the rate asked for over the mean turns a session.
//   The process starts five minutes before the trace does, so the trace opens in the steady
//   state (sessions already under way), as a window of a live service's traffic would.

import type { TraceRequest } from './trace.js';
import { BlockHasher, type Segment, tokensOf } from './workload-blocks.js';
import type { WorkloadSettings, WorkloadShape } from './workload-common.js';
import { SeededRandom, Zipf } from './workload-random.js';

const AGENTS = 4;
/** A session's turns past the first: geometric with this chance of ending after each. */
const END_CHANCE = 1 / 8;
const MAX_TURNS = 40;
const MAX_PROMPT_TOKENS = 120_000;
const USER_TURN_CHANCE = 0.15;
const DECODE_MS_PER_TOKEN = 20;
const WARMUP_MS = 300_000;

/** The mean turns of a session (before the context cuts any short). */
const MEAN_TURNS = (1 - (1 - END_CHANCE) ** MAX_TURNS) / END_CHANCE;

function generate({ seed, requests, ratePerS }: WorkloadSettings): TraceRequest[] {
  const random = new SeededRandom(seed);
  const hasher = new BlockHasher();
  const systems: Segment[] = [];
  for (let i = 0; i < AGENTS; i++) systems.push(hasher.segment(random.tokens(3000, 0.5, 1000, 16_000)));
  const popularity = new Zipf(AGENTS, 1);
  const sessionGapMs = (1000 * MEAN_TURNS) / ratePerS;
  const out: TraceRequest[] = [];
  let start = -WARMUP_MS;
  for (let index = 0; ; index++) {
    start += random.exponential(sessionGapMs);
    // Every later session starts, and so every one of its turns arrives, after this one.
    if (index % 32 === 0 && out.length >= requests && start > nthArrival(out, requests)) return out;
    const session = `session-${index}`;
    const prompt: Segment[] = [
      systems[popularity.draw(random)] as Segment,
      hasher.segment(random.tokens(250, 1, 8, 8000)),
    ];
    const turns = Math.min(MAX_TURNS, 1 + Math.floor(Math.log(1 - random.next()) / Math.log(1 - END_CHANCE)));
    let at = start;
    for (let turn = 0; turn < turns; turn++) {
      const inputTokens = tokensOf(prompt);
      if (inputTokens > MAX_PROMPT_TOKENS) break;
      const outputTokens = random.tokens(120, 0.9, 8, 4096);
      // Turns before the window are drawn all the same, so that the window's sessions are
      // those a longer trace would hold; their blocks are never asked for.
      if (at >= 0) out.push({ arrivalMs: at, inputTokens, outputTokens, blocks: hasher.blocks(prompt), session });
      prompt.push(hasher.segment(outputTokens));
      const user = random.chance(USER_TURN_CHANCE);
      prompt.push(hasher.segment(user ? random.tokens(60, 1, 4, 2000) : random.tokens(450, 1.2, 16, 16_000)));
      at += outputTokens * DECODE_MS_PER_TOKEN + (user ? random.lognormal(15_000, 0.8) : random.lognormal(1500, 1));
    }
  }
}

/** The `n`-th earliest arrival of `requests` (n of 1 or more, at most their count). */
function nthArrival(requests: readonly TraceRequest[], n: number): number {
  return requests.map((request) => request.arrivalMs).sort((a, b) => a - b)[n - 1] as number;
}

/** `agent-sessions`, as the registry lists it. */
export const AGENT_SESSIONS: WorkloadShape = {
  help: "multi-turn agent sessions: 4 agents' shared system prompts, each turn the session so far plus a tool output or user message, think-time gaps; Poisson sessions",
  defaultRatePerS: 6,
  generate,
};
