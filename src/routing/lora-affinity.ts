// LoRA affinity, as llm-d's scorer reads vLLM's `vllm:lora_requests_info`: a request names its
// adapter in `model`; a worker already running it serves it at once, one with room loads it,
// one where it waits comes next, one full of other adapters would make it wait for a slot.

import type { EngineLoadSource } from './kv-prefix.js';
import type { Scorer } from './scoring.js';

/**
 * What a worker's adapters say for a request of `model`: 1 running it, 0.8 room to load it,
 * 0.6 waiting for it, 0 full of others (llm-d's scores); 0.5 where the engine does not report
 * its adapters. A model no candidate runs or waits for is a base model or an adapter loaded
 * nowhere yet: every candidate scores the same then (LoRA has nothing to say), so that a base
 * model's requests are not kept from a worker full of adapters.
 *
 * @example
 * scoredPolicy({ scorers: [{ scorer: loraAffinityScorer((w) => loads.get(w)), weight: 2 }] });
 */
export function loraAffinityScorer<W>(loadOf: EngineLoadSource<W>): Scorer<W> {
  return {
    name: 'lora-affinity',
    score(candidates, _load, input) {
      const model = input?.body.model;
      const loras = candidates.map((worker) => loadOf(worker)?.lora);
      const known =
        typeof model === 'string' &&
        loras.some((lora) => lora !== undefined && (lora.running.includes(model) || lora.waiting.includes(model)));
      if (!known) return candidates.map(() => 0.5);
      return loras.map((lora) => {
        if (lora === undefined) return 0.5;
        if (lora.running.includes(model as string)) return 1;
        const held = new Set([...lora.running, ...lora.waiting]).size;
        if (held < lora.max) return 0.8;
        return lora.waiting.includes(model as string) ? 0.6 : 0;
      });
    },
  };
}
