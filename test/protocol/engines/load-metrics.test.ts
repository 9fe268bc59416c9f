import { describe, expect, it } from 'vitest';
import { readEngineLoad } from '../../../src/protocol/engines/load-metrics.js';
import { SGLANG_LOAD_METRICS } from '../../../src/protocol/engines/sglang.js';
import { VLLM_LOAD_METRICS } from '../../../src/protocol/engines/vllm.js';
import { engineQueueScorer, kvUsageScorer } from '../../../src/routing/kv-prefix.js';

describe("the engines' load in their /metrics", () => {
  it("vLLM's names: waiting and running summed over label sets, KV usage the highest; other series ignored", () => {
    const text = [
      '# HELP vllm:num_requests_waiting Number of requests waiting to be processed.',
      '# TYPE vllm:num_requests_waiting gauge',
      'vllm:num_requests_waiting{engine="0",model_name="qwen"} 3.0',
      'vllm:num_requests_waiting{engine="1",model_name="qwen"} 2.0',
      'vllm:num_requests_running{engine="0",model_name="qwen"} 7.0',
      'vllm:kv_cache_usage_perc{engine="0",model_name="qwen"} 0.25',
      'vllm:kv_cache_usage_perc{engine="1",model_name="qwen"} 0.5',
      'vllm:num_requests_waiting_by_reason{reason="capacity"} 9',
      'process_cpu_seconds_total 12.5',
    ].join('\n');
    expect(readEngineLoad(text, VLLM_LOAD_METRICS)).toEqual({ waiting: 5, running: 7, kvUsage: 0.5 });
  });

  it("SGLang's names, a series without labels and one with a timestamp; none of them: undefined", () => {
    const text =
      'sglang:num_queue_reqs 4\nsglang:num_running_reqs{tp_rank="0"} 2 1700000000000\nsglang:token_usage 0.9\n';
    expect(readEngineLoad(text, SGLANG_LOAD_METRICS)).toEqual({ waiting: 4, running: 2, kvUsage: 0.9 });
    expect(readEngineLoad(text, VLLM_LOAD_METRICS)).toBeUndefined();
  });

  it('a value that is not a number is no reading; a comment naming a metric is not one either', () => {
    expect(readEngineLoad('vllm:num_requests_waiting{model_name="m"} NaN\n', VLLM_LOAD_METRICS)).toBeUndefined();
    expect(
      readEngineLoad('# TYPE vllm:num_requests_waiting gauge\n#vllm:num_requests_waiting 3\n', VLLM_LOAD_METRICS),
    ).toBeUndefined();
    expect(readEngineLoad('vllm:num_requests_waiting\t4\n', VLLM_LOAD_METRICS)).toMatchObject({ waiting: 4 });
  });

  it('scored: the shortest engine queue and the most KV room score 1; an unknown load is neutral', () => {
    const loads = new Map([
      ['a', { waiting: 0, running: 2, kvUsage: 0.9 }],
      ['b', { waiting: 4, running: 6, kvUsage: 0.1 }],
    ]);
    const loadOf = (worker: string) => loads.get(worker);
    const view = { inFlight: () => 0 };
    expect(engineQueueScorer(loadOf).score(['a', 'b', 'c'], view, undefined)).toEqual([1, 0, 0.5]);
    expect(
      kvUsageScorer(loadOf)
        .score(['a', 'b', 'c'], view, undefined)
        .map((x) => Number(x.toFixed(2))),
    ).toEqual([0.1, 0.9, 0.5]);
  });
});
