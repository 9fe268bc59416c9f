// What a worker entry is (`--prefill`/`--decode`, a file's list, the admin API) and how a list
// of them is read. Apart from workers.ts, which needs the rows, so that the rows can use it.
import { DECODE_WORKER_FIELDS, PREFILL_WORKER_FIELDS } from '../../engines/registry.js';
import type { SglangPrefillWorkerFields, WorkerFieldKind } from '../../engines/sglang/worker-fields.js';
import { type WithAttributes, WORKER_ATTRIBUTES, type WorkerAttributes } from '../../routing/worker-attributes.js';
import { describeValue } from '../../util/describe-value.js';
import { Invalid, withHint } from './setting.js';

/**
 * A prefill worker of the proxy: its base URL and, for SGLang, its bootstrap server and DP
 * rank ({@link SglangPrefillWorkerFields}).
 */
export interface ProxyPrefillWorker extends SglangPrefillWorkerFields, KvEventEndpoints, WorkerLabels {
  url: string;
  /** How clients and metrics name it (`prefill-0`, ... by its place in the list when omitted): never its address. */
  name?: string | undefined;
}

/**
 * What a worker entry says of the worker beyond its address: its `labels` as given (a file's
 * entry, a pod's labels), read into `attributes`, which routing reads (the `same-label` filter).
 *
 * @example
 * const labelled: ProxyDecodeWorker = { url: 'http://d0:8000', labels: { 'disagg.ai/revision': 'v2' } };
 */
export interface WorkerLabels extends WithAttributes {
  /**
   * Label keys to text values (`disagg.ai/revision: v2`, `zone: a`); the keys of
   * {@link WORKER_ATTRIBUTES} are the ones disagg gives a meaning to. Given, not kept: the
   * entry as read has them in `attributes` (which an entry may also give, as one read already
   * does).
   */
  labels?: Readonly<Record<string, string>> | undefined;
}

/**
 * Where a worker publishes its KV cache events, when not at `--kv-events-port` on its host
 * (`tcp://10.0.0.5:5557`); a worker of another host's publisher, say.
 */
export interface KvEventEndpoints {
  kvEvents?: string | undefined;
  kvEventsReplay?: string | undefined;
}

/** A decode worker of the proxy. */
export interface ProxyDecodeWorker extends KvEventEndpoints, WorkerLabels {
  url: string;
  /** How clients and metrics name it (`decode-0`, ... by its place in the list when omitted): never its address. */
  name?: string | undefined;
}

/** Workers from repeated flags, a comma-separated string, or a list of URLs or objects. */
function workers(value: unknown, kinds: Readonly<Record<string, WorkerFieldKind>>): Array<{ url: string }> {
  const fields = Object.keys(kinds);
  const list: unknown[] = Array.isArray(value)
    ? value.flatMap((entry) => (typeof entry === 'string' ? entry.split(',') : [entry]))
    : typeof value === 'string'
      ? value.split(',')
      : [];
  const result = list
    .map((entry) => (typeof entry === 'string' ? entry.trim() : entry))
    .filter((entry) => entry !== '')
    .map((entry) => (typeof entry === 'string' ? { url: entry } : entry));
  for (const entry of result) {
    if (typeof entry !== 'object' || entry === null || Array.isArray(entry)) {
      throw new Invalid(`takes URLs or objects with a url, got ${describeValue(entry)}`);
    }
    for (const [field, fieldValue] of Object.entries(entry)) {
      if (!fields.includes(field)) {
        throw new Invalid(withHint(`has an unknown worker field ${JSON.stringify(field)}`, field, fields));
      }
      if (kinds[field] === 'integer' && !Number.isInteger(fieldValue)) {
        throw new Invalid(`has a worker whose ${field} is not a whole number: ${describeValue(fieldValue)}`);
      }
      if (kinds[field] === 'labels') checkLabels(fieldValue);
      // The url has its own check below (an http(s) URL), which says more.
      if (kinds[field] === 'string' && field !== 'url' && (typeof fieldValue !== 'string' || fieldValue === '')) {
        throw new Invalid(`has a worker whose ${field} is not a non-empty string: ${describeValue(fieldValue)}`);
      }
    }
    const url = (entry as { url?: unknown }).url;
    if (typeof url !== 'string' || !/^https?:\/\/[^/]+/.test(url)) {
      throw new Invalid(`has ${describeValue(url ?? entry)}, which is not an http(s) URL such as http://10.0.0.2:8000`);
    }
    // The proxy calls the worker's own routes under its URL (/v1/completions, /health): a URL
    // that already ends in /v1 would be called at /v1/v1/completions.
    if (/\/v1\/*$/.test(url)) {
      throw new Invalid(
        `has ${describeValue(url)}, which ends in /v1: give the worker's base URL (${url.replace(/\/v1\/*$/, '')}); the proxy adds /v1/completions, /health and the rest itself`,
      );
    }
  }
  const names = result.map((entry) => (entry as { name?: unknown }).name).filter((name) => name !== undefined);
  const twice = names.find((name, i) => names.indexOf(name) !== i);
  if (twice !== undefined) throw new Invalid(`names two workers ${describeValue(twice)}: a name is one worker`);
  return (result as Array<{ url: string } & WorkerLabels & SglangPrefillWorkerFields>).map(withAttributes);
}

/** Labels (and attributes) are a mapping of non-empty keys to text, as Kubernetes labels are. */
function checkLabels(value: unknown): void {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new Invalid(`has a worker whose labels are not a mapping of keys to text: ${describeValue(value)}`);
  }
  for (const [key, text] of Object.entries(value)) {
    if (key.trim() === '') throw new Invalid(`has a worker with a label without a key: ${describeValue(value)}`);
    if (typeof text !== 'string') {
      throw new Invalid(`has a worker whose label ${JSON.stringify(key)} is not text: ${describeValue(text)}`);
    }
  }
}

/**
 * An entry with its attributes: its labels, and the well-known ones its own fields state (an
 * SGLang prefill entry's `dpRank`); an entry with neither stays as it was.
 *
 * @throws {Invalid} for labels that say otherwise than the entry's own field.
 */
function withAttributes<E extends { url: string } & WorkerLabels & SglangPrefillWorkerFields>(entry: E): E {
  if (entry.labels === undefined && entry.dpRank === undefined) return entry;
  const { labels, ...rest } = entry;
  // An entry read before (disagg serve reads its file, then the proxy its options) has them already.
  const attributes: Record<string, string> = { ...entry.attributes, ...labels };
  if (entry.dpRank !== undefined) {
    const rank = String(entry.dpRank);
    const given = attributes[WORKER_ATTRIBUTES.dpRank];
    if (given !== undefined && given !== rank) {
      throw new Invalid(
        `has a worker whose label ${WORKER_ATTRIBUTES.dpRank} is ${describeValue(given)} but whose dpRank is ${rank} (${entry.url}): give one`,
      );
    }
    attributes[WORKER_ATTRIBUTES.dpRank] = rank;
  }
  return { ...rest, attributes: Object.freeze(attributes) as WorkerAttributes } as E;
}

/** Prefill workers whose data-parallel size is given must say their rank too. */
function prefillWorkers(list: Array<{ url: string }>): Array<{ url: string }> {
  for (const worker of list as ProxyPrefillWorker[]) {
    if (worker.dpSize !== undefined && worker.dpRank === undefined) {
      throw new Invalid(
        `has a worker with dpSize ${worker.dpSize} but no dpRank (${worker.url}): rooms are routed to the rank they are congruent to, so give each rank its own entry`,
      );
    }
  }
  return list;
}

/** Prefill workers from repeated flags, a comma-separated string, or a list of URLs or objects. */
export function parsePrefillWorkers(value: unknown): ProxyPrefillWorker[] {
  return prefillWorkers(workers(value, PREFILL_WORKER_FIELDS)) as ProxyPrefillWorker[];
}

/** Decode workers from repeated flags, a comma-separated string, or a list of URLs or objects. */
export function parseDecodeWorkers(value: unknown): ProxyDecodeWorker[] {
  return workers(value, DECODE_WORKER_FIELDS);
}
