/**
 * Where an engine's Prometheus endpoint (`GET /metrics`) says how loaded it is: requests
 * waiting in its queue, requests running, and the share (0 to 1) of its KV cache in use. Summed
 * over label sets (a worker serving several models), the usage as their maximum.
 */
export interface EngineLoadMetrics {
  readonly waiting: string;
  readonly running: string;
  readonly kvUsage: string;
  /**
   * The gauge that says which LoRA adapters the engine holds (vLLM's `vllm:lora_requests_info`:
   * labels `max_lora`, `running_lora_adapters`, `waiting_lora_adapters`, comma-separated; its
   * value the time it was set, so the latest series is the one with the greatest value).
   */
  readonly loraInfo?: string | undefined;
}

/** The LoRA adapters of one engine: how many it can hold in a batch, those running and those waiting. */
export interface LoraState {
  max: number;
  running: readonly string[];
  waiting: readonly string[];
}

/** One engine's load, as last read. */
export interface EngineLoad {
  waiting: number;
  running: number;
  kvUsage: number;
  /** Its LoRA adapters, where the engine reports them (vLLM with `--enable-lora`). */
  lora?: LoraState | undefined;
}

/** A label's value in a Prometheus sample's labels (`{a="x",b="y"}`), unescaped; '' when absent. */
function labelOf(labels: string, name: string): string {
  const match = new RegExp(`(?:^|[{,\\s])${name}="((?:[^"\\\\]|\\\\.)*)"`).exec(labels);
  return match === null ? '' : (match[1] as string).replace(/\\(.)/g, '$1');
}

const names = (list: string) =>
  list
    .split(',')
    .map((name) => name.trim())
    .filter((name) => name !== '');

/**
 * The load in a Prometheus text exposition, by `metrics`' names; undefined when none of them is
 * there (not this engine, or not up yet).
 */
export function readEngineLoad(text: string, metrics: EngineLoadMetrics): EngineLoad | undefined {
  const load: EngineLoad = { waiting: 0, running: 0, kvUsage: 0 };
  let seen = false;
  let loraAt = Number.NEGATIVE_INFINITY;
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    // Blanks or tabs may separate the tokens of a line (Prometheus's text format).
    const end = line.search(/[\s{]/);
    const name = end === -1 ? line : line.slice(0, end);
    if (name === metrics.loraInfo) {
      const close = line.lastIndexOf('}');
      const at = Number(
        line
          .slice(close + 1)
          .trim()
          .split(/\s+/)[0],
      );
      // The latest series wins: its value is when it was set.
      if (close === -1 || !(at >= loraAt)) continue;
      loraAt = at;
      const labels = line.slice(end, close + 1);
      const max = Number(labelOf(labels, 'max_lora'));
      load.lora = {
        max: Number.isFinite(max) ? max : 0,
        running: names(labelOf(labels, 'running_lora_adapters')),
        waiting: names(labelOf(labels, 'waiting_lora_adapters')),
      };
      continue;
    }
    const field =
      name === metrics.waiting
        ? 'waiting'
        : name === metrics.running
          ? 'running'
          : name === metrics.kvUsage
            ? 'kvUsage'
            : undefined;
    if (field === undefined) continue;
    // The value follows the labels: the first field after the closing brace (or the name).
    const rest = line.slice(line.lastIndexOf('}') + 1 || name.length).trim();
    const value = Number(rest.split(/\s+/)[0]);
    if (!Number.isFinite(value)) continue;
    seen = true;
    if (field === 'kvUsage') load.kvUsage = Math.max(load.kvUsage, value);
    else load[field] += value;
  }
  return seen ? load : undefined;
}
