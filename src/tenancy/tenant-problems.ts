// A tenants file's problems as an operator reads them: the tenant by its name rather than its
// index (`tenant "batch"`, not `tenants.1`), and a did-you-mean for a misspelt key, as the
// config file's keys have.
import { closest } from '../util/closest.js';

/** One problem as zod reports it (the fields read here). */
export interface SchemaIssue {
  readonly code: string;
  readonly path: readonly PropertyKey[];
  readonly message: string;
  readonly keys?: readonly string[];
}

/** The keys each object of the file may hold, by where it sits. */
export interface TenantFileKeys {
  /** The file's top level. */
  file: readonly string[];
  /** A tenant of `tenants`. */
  tenant: readonly string[];
  /** `default`'s limits. */
  limits: readonly string[];
  /** A band of `bands`. */
  band: readonly string[];
  /** A tenant's or `default`'s `slo`. */
  slo: readonly string[];
}

/**
 * One line for a problem of the file: where it is (the tenant by name when it has one) and
 * what is wrong, with the closest known key for an unknown one.
 *
 * @example
 * const keys = { file: ['tenants'], tenant: ['name', 'requestsPerMinute'], limits: [], band: [], slo: [] };
 * describeIssue({ code: 'unrecognized_keys', path: ['tenants', 0], keys: ['requestPerMinute'], message: 'Unrecognized key: "requestPerMinute"' }, { tenants: [{ name: 'batch' }] }, keys);
 * // 'tenant "batch": Unrecognized key: "requestPerMinute"; did you mean "requestsPerMinute"?'
 */
export function describeIssue(issue: SchemaIssue, raw: unknown, keys: TenantFileKeys): string {
  const where = placeOf(issue.path, raw);
  const hints =
    issue.code === 'unrecognized_keys'
      ? (issue.keys ?? []).flatMap((key) => {
          const near = closest(key, knownAt(issue.path, keys));
          return near === undefined ? [] : [`did you mean ${JSON.stringify(near)}?`];
        })
      : [];
  return `${where}: ${[issue.message, ...hints].join('; ')}`;
}

/** `tenant "batch".keys.0` for `tenants.1.keys.0`; the index when the tenant has no name. */
function placeOf(path: readonly PropertyKey[], raw: unknown): string {
  if (path.length === 0) return '(the file)';
  const [group, index, ...rest] = path;
  if (group === 'tenants' && typeof index === 'number') {
    const name = (raw as { tenants?: Array<{ name?: unknown }> } | undefined)?.tenants?.[index]?.name;
    const tenant =
      typeof name === 'string' && name !== '' ? `tenant ${JSON.stringify(name)}` : `tenant ${index + 1} (unnamed)`;
    return [tenant, ...rest.map(String)].join('.');
  }
  return path.map(String).join('.');
}

function knownAt(path: readonly PropertyKey[], keys: TenantFileKeys): readonly string[] {
  if (path.length === 0) return keys.file;
  if (path[0] === 'tenants' && path.length === 2) return keys.tenant;
  if (path[0] === 'default' && path.length === 1) return keys.limits;
  if (path[0] === 'bands' && path.length === 2) return keys.band;
  if (path.at(-1) === 'slo') return keys.slo;
  return [];
}
