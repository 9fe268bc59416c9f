/**
 * What an SGLang prefill worker entry may say beyond its URL and name: where its bootstrap
 * server is (the decode worker connects there for the KV) and its data-parallel rank.
 */
export interface SglangPrefillWorkerFields {
  /** The port of the worker's bootstrap server (the proxy's `bootstrapPort` when omitted). */
  bootstrapPort?: number | undefined;
  /** The host of the bootstrap server; the host of `url` when omitted. */
  bootstrapHost?: string | undefined;
  /** Data parallelism: the worker's rank and the group's size (rooms follow the rank). */
  dpRank?: number | undefined;
  dpSize?: number | undefined;
}

/**
 * The kind of value each field of a worker entry takes, as the settings check it: `labels` is a
 * mapping of label keys to text values.
 */
export type WorkerFieldKind = 'string' | 'integer' | 'labels';

/** {@link SglangPrefillWorkerFields} as data, for the settings' check of a worker entry. */
export const SGLANG_PREFILL_WORKER_FIELDS: Readonly<Record<keyof SglangPrefillWorkerFields, WorkerFieldKind>> =
  Object.freeze({ bootstrapPort: 'integer', bootstrapHost: 'string', dpRank: 'integer', dpSize: 'integer' });
