/**
 * Where an engine's Prometheus endpoint (`GET /metrics`) says how loaded it is: requests
 * waiting in its queue, requests running, and the share (0 to 1) of its KV cache in use. Summed
 * over label sets (a worker serving several models), the usage as their maximum.
 */
export interface EngineLoadMetrics {
  readonly waiting: string;
  readonly running: string;
  readonly kvUsage: string;
}

/** One engine's load, as last read. */
export interface EngineLoad {
  waiting: number;
  running: number;
  kvUsage: number;
}

/**
 * The load in a Prometheus text exposition, by `metrics`' names; undefined when none of them is
 * there (not this engine, or not up yet).
 */
export function readEngineLoad(text: string, metrics: EngineLoadMetrics): EngineLoad | undefined {
  const load: EngineLoad = { waiting: 0, running: 0, kvUsage: 0 };
  let seen = false;
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    // Blanks or tabs may separate the tokens of a line (Prometheus's text format).
    const end = line.search(/[\s{]/);
    const name = end === -1 ? line : line.slice(0, end);
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
