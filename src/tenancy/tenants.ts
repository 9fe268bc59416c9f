// Who a request belongs to: the tenants of a tenants file (YAML or JSON), found by the API key
// a request sends, or named by a header that a trusted gateway in front sets; everything else
// is the default tenant. The file is read again when it changes, without a restart.
import { createHash, timingSafeEqual } from 'node:crypto';
import { readFileSync, type Stats, unwatchFile, watchFile } from 'node:fs';
import * as z from 'zod/mini';
import en from 'zod/v4/locales/en.js';
import type { ServiceLevelTargets } from '../routing/routing-input.js';
import type { Logger } from '../runtime/logger.js';
import { branded, DisaggError } from '../util/disagg-error.js';
import { parseYaml, yamlProblem } from '../util/yaml.js';
import { describeIssue, type TenantFileKeys } from './tenant-problems.js';

// zod's functional build, bundled (see request-schemas.ts); its English messages name each
// problem of a tenants file. The configuration is this bundled copy's own, not a user's zod.
z.config(en());

const positiveInt = () => z.optional(z.int().check(z.positive()));
const positiveMs = () => z.optional(z.number().check(z.positive()));

/** A tenant's service levels, in ms: the targets of its requests that name none in their headers. */
const SLO = z.strictObject({
  /** Time to the first token. */
  ttftMs: positiveMs(),
  /** The mean gap between tokens (llm-d's time per output token). */
  itlMs: positiveMs(),
});

const limits = {
  /** Its priority band: higher is admitted first (0 by default). */
  priority: z.optional(z.int()),
  /** Requests admitted per minute. */
  requestsPerMinute: positiveInt(),
  /** Tokens per minute: prompt tokens (estimated, then as reported) and generated ones. */
  tokensPerMinute: positiveInt(),
  /** Requests under way or waiting at once. */
  maxConcurrent: positiveInt(),
  /** Its requests' service levels where their headers give none (`x-disagg-slo-ttft-ms`, ...). */
  slo: z.optional(SLO),
};

const LIMITS = z.strictObject(limits);

const TENANT = z.strictObject({
  name: z.string().check(z.minLength(1), z.maxLength(64)),
  /** Its API keys: a request with one of them is the tenant's (and is let in). */
  keys: z._default(z.array(z.string().check(z.minLength(8))), []),
  ...limits,
});

const FILE = z.strictObject({
  tenants: z._default(z.array(TENANT), []),
  /** The tenant of requests that name none: its own limits. */
  default: z._default(LIMITS, {}),
  /** A queue time-to-live per priority band, in ms (else the proxy's queueTimeoutMs). */
  bands: z._default(z.array(z.strictObject({ priority: z.int(), queueTimeoutMs: z.int().check(z.positive()) })), []),
});

const FILE_KEYS: TenantFileKeys = {
  file: Object.keys(FILE.shape),
  tenant: Object.keys(TENANT.shape),
  limits: Object.keys(LIMITS.shape),
  band: ['priority', 'queueTimeoutMs'],
  slo: Object.keys(SLO.shape),
};

/** One tenant as the file gives it (the default tenant is named `default`). */
export interface Tenant {
  name: string;
  priority: number;
  requestsPerMinute: number | undefined;
  tokensPerMinute: number | undefined;
  maxConcurrent: number | undefined;
  /** Its requests' service levels where their headers name none; undefined: none. */
  slo?: ServiceLevelTargets | undefined;
}

/** A tenants file that cannot be used: its path and what is wrong. `code`: `DISAGG_TENANTS_FILE`. */
export class TenantsFileError extends DisaggError {
  static override readonly is = branded<TenantsFileError>('TenantsFileError');
  declare readonly code: 'DISAGG_TENANTS_FILE';

  constructor(message: string, options?: { cause?: unknown }) {
    super('DISAGG_TENANTS_FILE', message, options);
  }
}

/** The name of the tenant of requests that name none. */
export const DEFAULT_TENANT = 'default';

/** What a tenants file holds, checked. */
export interface TenantsTable {
  tenants: Tenant[];
  byKey: ReadonlyMap<string, Tenant>;
  byName: ReadonlyMap<string, Tenant>;
  defaultTenant: Tenant;
  bands: ReadonlyMap<number, number>;
}

/**
 * Parses a tenants file's text (YAML or JSON). Every problem is named with its place in the
 * file; a key given to two tenants and a name used twice are refused.
 *
 * @example
 * parseTenants('tenants:\n  - { name: chat, keys: [sk-chat-0001], priority: 10, requestsPerMinute: 600, slo: { ttftMs: 2000, itlMs: 100 } }\n', 'tenants.yaml');
 *
 * @throws {TenantsFileError} for text that is not YAML or JSON, or a table that does not check.
 */
export function parseTenants(text: string, path: string): TenantsTable {
  let raw: unknown;
  try {
    raw = parseYaml(text);
  } catch (error) {
    throw new TenantsFileError(`${path} is neither YAML nor JSON: ${yamlProblem(error)}`, { cause: error });
  }
  const parsed = FILE.safeParse(raw ?? {});
  if (!parsed.success) {
    const problems = parsed.error.issues.map((issue) => describeIssue(issue, raw, FILE_KEYS));
    throw new TenantsFileError(`${path}: ${problems.join('; ')}`);
  }
  const table = parsed.data;
  const tenant = (name: string, given: z.infer<typeof TENANT> | z.infer<typeof LIMITS>) => ({
    name,
    priority: given.priority ?? 0,
    requestsPerMinute: given.requestsPerMinute,
    tokensPerMinute: given.tokensPerMinute,
    maxConcurrent: given.maxConcurrent,
    slo: sloOf(given.slo),
  });
  const byKey = new Map<string, Tenant>();
  const byName = new Map<string, Tenant>();
  const tenants: Tenant[] = [];
  for (const given of table.tenants) {
    if (given.name === DEFAULT_TENANT)
      throw new TenantsFileError(
        `${path}: '${DEFAULT_TENANT}' is the default tenant's name: give its limits under default`,
      );
    if (byName.has(given.name)) throw new TenantsFileError(`${path}: the tenant ${given.name} is named twice`);
    const made = tenant(given.name, given);
    for (const key of given.keys) {
      const owner = byKey.get(key);
      if (owner !== undefined) throw new TenantsFileError(`${path}: a key of ${given.name} is also ${owner.name}'s`);
      byKey.set(key, made);
    }
    byName.set(made.name, made);
    tenants.push(made);
  }
  const defaultTenant = tenant(DEFAULT_TENANT, table.default);
  byName.set(DEFAULT_TENANT, defaultTenant);
  const bands = new Map(table.bands.map((band) => [band.priority, band.queueTimeoutMs]));
  return { tenants, byKey, byName, defaultTenant, bands };
}

/** A tenant's service levels as the file gives them; undefined for none (an empty `slo` too). */
function sloOf(given: z.infer<typeof SLO> | undefined): ServiceLevelTargets | undefined {
  if (given?.ttftMs === undefined && given?.itlMs === undefined) return undefined;
  return {
    ...(given.ttftMs === undefined ? {} : { ttftMs: given.ttftMs }),
    ...(given.itlMs === undefined ? {} : { itlMs: given.itlMs }),
  };
}

/** The bearer key a request sends, if any. */
export function bearerKey(authorization: string | undefined): string | undefined {
  const key = /^Bearer\s+(.+)$/i.exec(authorization ?? '')?.[1]?.trim();
  return key === undefined || key === '' ? undefined : key;
}

/**
 * The key a client sent: `Authorization: Bearer <key>` (OpenAI's clients), else `x-api-key`
 * (Anthropic's: Claude Code with an API key sends only that); undefined for none.
 *
 * @example
 * clientKey({ 'x-api-key': 'sk-1' }); // 'sk-1'
 */
export function clientKey(headers: Readonly<Record<string, string | string[] | undefined>>): string | undefined {
  const bearer = bearerKey(typeof headers.authorization === 'string' ? headers.authorization : undefined);
  if (bearer !== undefined) return bearer;
  const key = typeof headers['x-api-key'] === 'string' ? headers['x-api-key'].trim() : '';
  return key === '' ? undefined : key;
}

const digest = (text: string) => createHash('sha256').update(text).digest();

/** Options of {@link TenantDirectory}. */
export interface TenantDirectoryOptions {
  /** The tenants file; none: every request is the default tenant's (with no limits). */
  file?: string | undefined;
  /** A header a trusted gateway sets to the tenant's name; none by default. */
  header?: string | undefined;
  /** The API keys whose requests may name their tenant in `header` (none: any request may). */
  headerKeys?: readonly string[] | undefined;
  /**
   * How often the file is looked at for a change, in ms (1,000 by default). Polled rather than
   * watched for events: an editor's save by rename and a Kubernetes ConfigMap's swap of a
   * symbolic link both end an event watch.
   */
  pollMs?: number | undefined;
  logger?: Logger | undefined;
}

/**
 * The tenants of the proxy: {@link TenantDirectory.tenantOf} says whose a request is, from its
 * key (a tenant's key is also an API key), or from the trusted header, else the default
 * tenant. With a file, the file is watched and read again when it changes; a change that does
 * not check is logged and the tenants stay as they were. `close()` stops the watch.
 *
 * @throws {TenantsFileError} (the constructor) for a file that cannot be read or does not check.
 */
export class TenantDirectory {
  #table: TenantsTable;
  readonly #options: TenantDirectoryOptions;
  readonly #headerKeys: Buffer[] | undefined;
  #stopWatch: (() => void) | undefined;

  constructor(options: TenantDirectoryOptions = {}) {
    this.#options = options;
    this.#headerKeys = options.headerKeys?.map(digest);
    this.#table = options.file === undefined ? parseTenants('', 'no tenants file') : this.#read(options.file);
    if (options.file !== undefined) {
      const file = options.file;
      const changed = (now: Stats, before: Stats) => {
        if (now.mtimeMs !== before.mtimeMs || now.ino !== before.ino || now.size !== before.size) this.#reload(file);
      };
      watchFile(file, { interval: options.pollMs ?? 1000, persistent: false }, changed);
      this.#stopWatch = () => unwatchFile(file, changed);
    }
  }

  /** The tenants as the file says now (the default one last). */
  get tenants(): readonly Tenant[] {
    return [...this.#table.tenants, this.#table.defaultTenant];
  }

  /** Whether `key` is a tenant's key (such a key is an API key too). */
  isTenantKey(key: string | undefined): boolean {
    return key !== undefined && this.#table.byKey.has(key);
  }

  /** The queue time-to-live of a priority band, if the file gives one. */
  queueTimeoutMs(priority: number): number | undefined {
    return this.#table.bands.get(priority);
  }

  /**
   * Whose a request is: the tenant of its key; else, with a header configured, the tenant it
   * names (a name not in the file is a tenant of its own with the default's limits), if the
   * request's key may name one; else the default tenant.
   */
  tenantOf(headers: Readonly<Record<string, string | string[] | undefined>>): Tenant {
    const key = clientKey(headers);
    const owner = key === undefined ? undefined : this.#table.byKey.get(key);
    if (owner !== undefined) return owner;
    const header = this.#options.header;
    if (header !== undefined) {
      const value = headers[header.toLowerCase()];
      const named = (Array.isArray(value) ? value[0] : value)?.trim();
      if (named !== undefined && named !== '' && this.#mayName(key)) {
        return this.#table.byName.get(named) ?? { ...this.#table.defaultTenant, name: named.slice(0, 64) };
      }
    }
    return this.#table.defaultTenant;
  }

  /**
   * Whether the request comes from a trusted caller: one whose key may name a tenant
   * (`--tenant-header-keys`; every caller when no such key is set), as a gateway in front does.
   */
  trusts(headers: Readonly<Record<string, string | string[] | undefined>>): boolean {
    return this.#mayName(clientKey(headers));
  }

  /** Stops looking at the file for changes. */
  close(): void {
    this.#stopWatch?.();
    this.#stopWatch = undefined;
  }

  #mayName(key: string | undefined): boolean {
    if (this.#headerKeys === undefined) return true;
    if (key === undefined) return false;
    const given = digest(key);
    return this.#headerKeys.some((allowed) => timingSafeEqual(allowed, given));
  }

  #read(file: string): TenantsTable {
    let text: string;
    try {
      text = readFileSync(file, 'utf8');
    } catch (error) {
      throw new TenantsFileError(`Cannot read the tenants file ${file}: ${(error as Error).message}`, { cause: error });
    }
    return parseTenants(text, file);
  }

  #reload(file: string): void {
    try {
      const table = this.#read(file);
      this.#table = table;
      this.#options.logger?.info({ file, tenants: table.tenants.length }, 'Read the tenants file again');
    } catch (error) {
      this.#options.logger?.error(
        { err: error, file },
        'The tenants file changed but cannot be used; the tenants stay as they were',
      );
    }
  }
}
