// What a worker says of itself beyond its address, as llm-d's endpoints carry an attribute map:
// labels from static config or discovery (a pod's), and the well-known keys below. Routing reads
// them (a filter pairing the legs by revision); nothing here is sent to a worker.

/**
 * A worker's attributes: label keys to values, as Kubernetes labels are (`disagg.ai/revision`,
 * `topology.kubernetes.io/zone`, a key of your own).
 */
export type WorkerAttributes = Readonly<Record<string, string>>;

/**
 * The attribute keys disagg itself gives a meaning to, each named once here: a worker's
 * config entry (its `labels`) or its pod's labels state them under these keys, and an SGLang
 * prefill entry's `dpRank` is its `dpRank` attribute too.
 * - `revision`: the model revision its engine serves (`--revision`; SGLang's `weight_version`);
 *   the `same-label` filter pairs prefill and decode workers by it unless told another key.
 * - `dpRank`: its data-parallel rank.
 * - `engineInstance`: which engine process it is (the instance behind several worker URLs).
 *
 * @example
 * WORKER_ATTRIBUTES.revision; // 'disagg.ai/revision'
 */
export const WORKER_ATTRIBUTES = Object.freeze({
  revision: 'disagg.ai/revision',
  dpRank: 'disagg.ai/dp-rank',
  engineInstance: 'disagg.ai/engine-instance',
} as const);

/** The name of a well-known attribute (`revision`, `dpRank`, `engineInstance`). */
export type WellKnownAttribute = keyof typeof WORKER_ATTRIBUTES;

/** What a worker object carries to be read by {@link attributeOf}: its attribute map, if any. */
export interface WithAttributes {
  /** Its labels and well-known attributes ({@link WORKER_ATTRIBUTES}); none when omitted. */
  readonly attributes?: WorkerAttributes | undefined;
}

/**
 * The value of `key` among `worker`'s attributes; undefined for a worker without it (or a value
 * that is not an object, such as a worker of a router's own that is a bare URL).
 *
 * @example
 * attributeOf({ url: 'http://d0:8000', attributes: { 'disagg.ai/revision': 'v2' } }, WORKER_ATTRIBUTES.revision); // 'v2'
 */
export function attributeOf(worker: unknown, key: string): string | undefined {
  if (typeof worker !== 'object' || worker === null) return undefined;
  const attributes = (worker as WithAttributes).attributes;
  return attributes !== undefined && Object.hasOwn(attributes, key) ? attributes[key] : undefined;
}
