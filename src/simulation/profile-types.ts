// What a simulated engine knows of the real one it stands for: how long its steps take and how
// much KV cache it holds, as published profiling of that engine measured them. Data, never
// numbers chosen to flatter a policy: every profile names where its numbers come from.

/** A point of a measured curve: `x` (tokens, a batch size) and the time it took, in ms. */
export interface ProfilePoint {
  readonly x: number;
  readonly ms: number;
}

/** Where a profile's numbers come from: a publication a reader can open and check. */
export interface ProfileSource {
  /** What it is (`Dynamo planner profiling, H200, TP1`). */
  readonly title: string;
  /** Where to read it (a repository file at a commit, a paper, a benchmark page). */
  readonly url: string;
  /** How the numbers here were taken from it (read off a table, fitted, converted from tokens/s). */
  readonly notes: string;
}

/**
 * One engine serving one model on one kind of GPU at one parallelism: the timing and memory
 * a simulated worker of this profile keeps.
 *
 * - Prefill: `prefill` is the time to prefill a prompt of `x` tokens from nothing (one
 *   request, as a TTFT-vs-ISL profile measures it). Prefilling `n` new tokens after `c`
 *   cached ones costs T(c + n) − T(c): the tokens' own compute, their attention over the
 *   cached prefix included, nothing for the prefix itself.
 * - Decode: `decode` is the time of one decode step at each batch size for a context of
 *   `contextTokens` tokens per sequence; longer or shorter contexts scale the step's
 *   attention part by `attentionShare` (see profile-timing).
 */
export interface EngineProfile {
  /** The name `--profile` takes (`qwen3-32b-h100-tp2-vllm`). */
  readonly name: string;
  /** The model (`Qwen/Qwen3-32B`). */
  readonly model: string;
  /** The GPU (`H100-SXM-80GB`). */
  readonly gpu: string;
  /** The engine whose scheduler and cache it models. */
  readonly engine: 'vllm' | 'sglang';
  /** GPUs per worker (tensor parallelism): what a worker costs in `disagg plan`'s budget. */
  readonly tensorParallel: number;
  /** The longest context a request may have (prompt and answer), in tokens. */
  readonly maxContextTokens: number;
  /** Tokens the GPU's KV cache holds (what the engine reports at start: vLLM's "GPU KV cache size"). */
  readonly kvCacheTokens: number;
  /** Bytes of KV cache per token (layers × KV heads × head size × 2 × dtype bytes): what a P→D transfer moves. */
  readonly kvBytesPerToken: number;
  /** Tokens per KV block (vLLM's block size; SGLang's page size). */
  readonly blockTokens: number;
  /** Tokens a step schedules at most (vLLM's max_num_batched_tokens; SGLang's chunked prefill size). */
  readonly maxBatchTokens: number;
  /** Sequences running at most (vLLM's max_num_seqs; SGLang's max_running_requests). */
  readonly maxRunning: number;
  /** Prefill time by prompt tokens (ascending `x`). */
  readonly prefill: readonly ProfilePoint[];
  /** Decode step time by batch size (ascending `x`), at `decodeContextTokens` per sequence. */
  readonly decode: readonly ProfilePoint[];
  /** The context per sequence the `decode` curve was measured at. */
  readonly decodeContextTokens: number;
  /**
   * The share (0-1) of a decode step's time that grows with the context read (attention),
   * at the `decode` curve's last point; the rest (weights, sampling) does not. Smaller
   * batches read that much less: the part is proportional to the batch (see profile-timing).
   */
  readonly attentionShare: number;
  /** The P→D link's bandwidth in GB/s (NIXL over RDMA, Mooncake's transfer engine). */
  readonly transferGBps: number;
  /** Tokens of the CPU offload tier (vLLM's offloading connector, LMCache); 0 for none. */
  readonly cpuCacheTokens: number;
  /** The bandwidth bringing offloaded KV back to the GPU, in GB/s (PCIe). */
  readonly cpuLoadGBps: number;
  /** Where the numbers come from. */
  readonly sources: readonly ProfileSource[];
}
