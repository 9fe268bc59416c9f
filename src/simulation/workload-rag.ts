// `rag`: long-context retrieval-augmented generation: an instruction, the documents a
// retriever ranked for the question, the question; a short answer. Where its shape comes from:
// - Popularity: RAGCache (Jin et al., 2024, arXiv:2404.12457) measures retrieval skewed
//   towards a small share of a corpus's documents, and questions recur; here both are Zipf
//   (10,000 documents, 20,000 distinct questions, exponent 1), Poisson arrivals.
// - Reuse: a document's KV is a prefix hit only behind the same blocks (CacheBlend, Yao et
//   al., EuroSys 2025, is about the rest), so reuse here comes from the shared instruction and
//   from questions asked again, which a retriever answers with the same documents in the same
//   order (its ranking is a function of the question); a popular document in first place is
//   reused across questions too.
// - Lengths: long-context RAG packs whole documents (lognormal, median 3,000 tokens) up to a
//   context budget per question (lognormal, median 20,000), so prompts run from 8k to 64k
//   tokens; questions are short (median 40) and so are answers (median 150).

import type { TraceRequest } from './trace.js';
import { BlockHasher, type Segment, tokensOf } from './workload-blocks.js';
import type { WorkloadSettings, WorkloadShape } from './workload-common.js';
import { SeededRandom, Zipf } from './workload-random.js';

const DOCUMENTS = 10_000;
const QUESTIONS = 20_000;
const INSTRUCTION_TOKENS = 1200;
const MIN_PROMPT_TOKENS = 8 * 1024;
const MAX_PROMPT_TOKENS = 64 * 1024;
const MAX_QUESTION_TOKENS = 500;

function generate({ seed, requests, ratePerS }: WorkloadSettings): TraceRequest[] {
  const random = new SeededRandom(seed);
  const hasher = new BlockHasher();
  const instruction = hasher.segment(INSTRUCTION_TOKENS);
  const documents: Segment[] = [];
  for (let i = 0; i < DOCUMENTS; i++) documents.push(hasher.segment(random.tokens(3000, 0.8, 256, 16_000)));
  const documentPopularity = new Zipf(DOCUMENTS, 1);
  const questionPopularity = new Zipf(QUESTIONS, 1);
  // A question's ranked documents, drawn the first time it is asked.
  const retrieved = new Map<number, Segment[]>();
  const retrieve = (): Segment[] => {
    const budget = random.tokens(20_000, 0.5, MIN_PROMPT_TOKENS, 60_000);
    const room = MAX_PROMPT_TOKENS - INSTRUCTION_TOKENS - MAX_QUESTION_TOKENS;
    const picked = new Set<number>();
    const scored: { document: Segment; score: number }[] = [];
    let total = INSTRUCTION_TOKENS;
    // The budget is at most 60k, documents at most 16k: room is left after a miss or two.
    for (let misses = 0; total < budget && misses < 50; ) {
      const index = documentPopularity.draw(random);
      const document = documents[index] as Segment;
      if (picked.has(index) || total + document.tokens > room) {
        misses++;
        continue;
      }
      picked.add(index);
      scored.push({ document, score: random.next() });
      total += document.tokens;
    }
    return scored.sort((a, b) => b.score - a.score).map(({ document }) => document);
  };
  const out: TraceRequest[] = [];
  let now = 0;
  for (let i = 0; i < requests; i++) {
    now += random.exponential(1000 / ratePerS);
    const question = questionPopularity.draw(random);
    let ranked = retrieved.get(question);
    if (ranked === undefined) {
      ranked = retrieve();
      retrieved.set(question, ranked);
    }
    // The same question in another user's words: the same documents, a new last segment.
    const prompt = [instruction, ...ranked, hasher.segment(random.tokens(40, 0.8, 4, MAX_QUESTION_TOKENS))];
    out.push({
      arrivalMs: now,
      inputTokens: tokensOf(prompt),
      outputTokens: random.tokens(150, 0.8, 8, 2048),
      blocks: hasher.blocks(prompt),
    });
  }
  return out;
}

/** `rag`, as the registry lists it. */
export const RAG: WorkloadShape = {
  help: "long-context RAG: a shared instruction, Zipf-popular documents in the retriever's order (8k-64k-token prompts), a short question; short answers",
  defaultRatePerS: 2,
  generate,
};
