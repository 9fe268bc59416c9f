import { describe, expect, it } from 'vitest';
import { type EngineLoad, readEngineLoad } from '../../src/protocol/engines/load-metrics.js';
import { VLLM_LOAD_METRICS } from '../../src/protocol/engines/vllm.js';
import { loraAffinityScorer } from '../../src/routing/lora-affinity.js';
import { RoutingInput } from '../../src/routing/routing-input.js';

const load = (lora: EngineLoad['lora']): EngineLoad => ({ waiting: 0, running: 0, kvUsage: 0, lora });
const noLoad = { inFlight: () => 0 };

describe("LoRA adapters in vLLM's /metrics (vllm:lora_requests_info)", () => {
  it('the latest series gives the adapters: max, running and waiting (comma-separated lists)', () => {
    const text = [
      'vllm:num_requests_running{model_name="base"} 1',
      '# TYPE vllm:lora_requests_info gauge',
      'vllm:lora_requests_info{max_lora="2",running_lora_adapters="old",waiting_lora_adapters=""} 1.7e+09',
      'vllm:lora_requests_info{max_lora="2",running_lora_adapters="sql,chat",waiting_lora_adapters="math"} 1.8e+09',
      'vllm:lora_requests_info{max_lora="2",running_lora_adapters="older",waiting_lora_adapters=""} 1.6e+09',
    ].join('\n');
    expect(readEngineLoad(text, VLLM_LOAD_METRICS)).toEqual({
      waiting: 0,
      running: 1,
      kvUsage: 0,
      lora: { max: 2, running: ['sql', 'chat'], waiting: ['math'] },
    });
    // Without LoRA (the gauge absent): no adapters said.
    expect(readEngineLoad('vllm:num_requests_running 1\n', VLLM_LOAD_METRICS)).toEqual({
      waiting: 0,
      running: 1,
      kvUsage: 0,
    });
  });
});

describe('the lora-affinity scorer', () => {
  const loads = new Map<string, EngineLoad | undefined>([
    ['running-it', load({ max: 2, running: ['sql'], waiting: [] })],
    ['room', load({ max: 2, running: ['chat'], waiting: [] })],
    ['waiting-full', load({ max: 1, running: ['chat'], waiting: ['sql'] })],
    ['full', load({ max: 1, running: ['math'], waiting: [] })],
    ['unknown', undefined],
  ]);
  const scorer = loraAffinityScorer<string>((worker) => loads.get(worker));
  const workers = [...loads.keys()];
  const scores = (model: string) => scorer.score(workers, noLoad, new RoutingInput({ model, prompt: 'x' }));

  it("scores as llm-d's: 1 running the adapter, 0.8 room to load it, 0.6 waiting for it, 0 full of others; 0.5 unknown", () => {
    expect(scores('sql')).toEqual([1, 0.8, 0.6, 0, 0.5]);
  });

  it('a model no worker runs or waits for (a base model, an adapter loaded nowhere yet) scores the same everywhere', () => {
    expect(scores('base-model')).toEqual([0.5, 0.5, 0.5, 0.5, 0.5]);
  });
});
