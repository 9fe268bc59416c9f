// What a fake worker says of itself: `/metrics`, its load under the names its engine gives them
// (vLLM's, SGLang's) in Prometheus's text format, as a router that reads engines' load scrapes
// them; and `/v1/models`, the model and its context, as a router that checks names reads it.
import type { EngineLoad, EngineLoadMetrics } from '../protocol/engines/load-metrics.js';
import type { FakeWorkerOptions } from './fake-types.js';

/**
 * The text of a fake worker's `/metrics`: requests running and waiting and the KV cache's
 * usage (0-1), labelled with the model; with `lora`, vLLM's LoRA gauge (its value the time it
 * was set, as vLLM's: the latest series wins).
 *
 * @example
 * loadMetricsText(VLLM_LOAD_METRICS, 'fake-model', { running: 2, waiting: 1, kvUsage: 0.5 }, undefined);
 * // '# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name="fake-model"} 2\n...'
 */
export function loadMetricsText(
  names: EngineLoadMetrics,
  model: string,
  load: Pick<EngineLoad, 'running' | 'waiting' | 'kvUsage'>,
  lora: FakeWorkerOptions['lora'],
): string {
  const label = `model_name="${model}"`;
  const lines = [
    `# TYPE ${names.running} gauge`,
    `${names.running}{${label}} ${load.running}`,
    `# TYPE ${names.waiting} gauge`,
    `${names.waiting}{${label}} ${load.waiting}`,
    `# TYPE ${names.kvUsage} gauge`,
    `${names.kvUsage}{${label}} ${load.kvUsage}`,
  ];
  if (lora !== undefined && names.loraInfo !== undefined) {
    const labels = `max_lora="${lora.max}",running_lora_adapters="${(lora.running ?? []).join(',')}",waiting_lora_adapters="${(lora.waiting ?? []).join(',')}"`;
    lines.push(`# TYPE ${names.loraInfo} gauge`, `${names.loraInfo}{${labels}} ${Date.now() / 1000}`);
  }
  return `${lines.join('\n')}\n`;
}

/**
 * The body of a fake worker's `GET /v1/models`, as vLLM lists its models: the base model, then
 * each LoRA adapter running, with its `parent`; each with the context it serves.
 *
 * @example
 * modelList('fake-model', 4096, undefined).data[0]; // { id: 'fake-model', object: 'model', owned_by: 'disagg-fake', max_model_len: 4096 }
 */
export function modelList(model: string, maxModelLen: number, lora: FakeWorkerOptions['lora']) {
  const adapters = (lora?.running ?? []).map((name) => ({
    id: name,
    object: 'model',
    owned_by: 'disagg-fake',
    root: `/adapters/${name}`,
    parent: model,
    max_model_len: maxModelLen,
  }));
  return {
    object: 'list',
    data: [{ id: model, object: 'model', owned_by: 'disagg-fake', max_model_len: maxModelLen }, ...adapters],
  };
}
