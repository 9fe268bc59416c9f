// Requests and tokens per minute, per tenant, in this process: a sliding minute of one-second
// buckets, so that a limit frees up second by second rather than all at once on the minute.
import type { Tenant } from './tenants.js';

const SECONDS = 60;
/** The most tenants counted at once (records of 960 bytes each). */
const MAX_TENANTS = 10_000;

/** What a tenant has used in the last minute, by second. */
interface Usage {
  requests: Float64Array;
  tokens: Float64Array;
  /** The second (since the epoch) of the newest bucket. */
  second: number;
}

/** Why a request is over its tenant's limits, and when it may try again. */
export interface OverLimit {
  limit: 'requestsPerMinute' | 'tokensPerMinute';
  allowed: number;
  used: number;
  retryAfterS: number;
}

/** Where per-minute limits are counted: this process ({@link MinuteWindows}) or a Redis every replica shares. */
export interface TenantLimits {
  /** Counts a request of `tenant` with its estimated `tokens`, or says which limit it is over. */
  take(tenant: Tenant, tokens: number): OverLimit | undefined | Promise<OverLimit | undefined>;
  /** Adds what an answer used beyond its estimate (negative gives back). */
  correct(tenant: Tenant, tokens: number): void | Promise<void>;
}

/**
 * The per-minute limits of every tenant (`requestsPerMinute`, `tokensPerMinute`), counted here.
 * `take` counts a request and its estimated tokens if both fit, `correct` adds what its answer
 * said beyond the estimate (or gives back what it did not use). Tenants without limits are not
 * counted at all.
 *
 * @example
 * const windows = new MinuteWindows();
 * const over = windows.take(tenant, 812); // undefined: counted; else which limit, and when to try again
 */
export class MinuteWindows implements TenantLimits {
  readonly #usage = new Map<string, Usage>();
  readonly #now: () => number;

  /** `now`: the clock in ms (Date.now by default; tests give their own). */
  constructor(now: () => number = Date.now) {
    this.#now = now;
  }

  /**
   * Counts one request of `tenant` with `tokens` (its estimate) if neither limit is passed by
   * it; else counts nothing and says which limit, how much of it is used, and in how many
   * seconds enough of it frees up.
   */
  take(tenant: Tenant, tokens: number): OverLimit | undefined {
    if (tenant.requestsPerMinute === undefined && tenant.tokensPerMinute === undefined) return undefined;
    const usage = this.#current(tenant.name);
    const over =
      check(usage.requests, 1, tenant.requestsPerMinute, 'requestsPerMinute', usage.second) ??
      check(usage.tokens, tokens, tenant.tokensPerMinute, 'tokensPerMinute', usage.second);
    if (over !== undefined) return over;
    const at = usage.second % SECONDS;
    usage.requests[at] = (usage.requests[at] as number) + 1;
    usage.tokens[at] = (usage.tokens[at] as number) + tokens;
    return undefined;
  }

  /** Adds `tokens` (negative gives back) to what `tenant` used this second: an answer's usage against its estimate. */
  correct(tenant: Tenant, tokens: number): void {
    if (tenant.tokensPerMinute === undefined || tokens === 0) return;
    const usage = this.#current(tenant.name);
    const at = usage.second % SECONDS;
    usage.tokens[at] = (usage.tokens[at] as number) + tokens;
  }

  /** What `tenant` used in the last minute. */
  used(tenant: string): { requests: number; tokens: number } {
    const usage = this.#usage.get(tenant);
    if (usage === undefined) return { requests: 0, tokens: 0 };
    this.#advance(usage);
    return { requests: sum(usage.requests), tokens: Math.max(0, sum(usage.tokens)) };
  }

  #current(tenant: string): Usage {
    let usage = this.#usage.get(tenant);
    if (usage === undefined) {
      // Names a gateway sends need not be in the file: the oldest record goes past the bound.
      if (this.#usage.size >= MAX_TENANTS) this.#usage.delete(this.#usage.keys().next().value as string);
      usage = { requests: new Float64Array(SECONDS), tokens: new Float64Array(SECONDS), second: this.#second() };
      this.#usage.set(tenant, usage);
    }
    this.#advance(usage);
    return usage;
  }

  #second(): number {
    return Math.floor(this.#now() / 1000);
  }

  /** Empties the buckets of the seconds that have passed since the newest. */
  #advance(usage: Usage): void {
    const now = this.#second();
    const passed = Math.min(SECONDS, now - usage.second);
    for (let step = 1; step <= passed; step++) {
      const at = (usage.second + step) % SECONDS;
      usage.requests[at] = 0;
      usage.tokens[at] = 0;
    }
    if (now > usage.second) usage.second = now;
  }
}

const sum = (buckets: Float64Array) => buckets.reduce((total, each) => total + each, 0);

/**
 * Whether `amount` more fits under `allowed` in the minute of `buckets`; if not, after how
 * many seconds the oldest buckets have freed enough (at least 1, at most 60).
 */
function check(
  buckets: Float64Array,
  amount: number,
  allowed: number | undefined,
  limit: OverLimit['limit'],
  second: number,
): OverLimit | undefined {
  if (allowed === undefined) return undefined;
  const used = Math.max(0, sum(buckets));
  if (used + amount <= allowed) return undefined;
  // The oldest bucket leaves the window first: count how many must leave.
  let freed = 0;
  let seconds = 1;
  for (; seconds <= SECONDS; seconds++) {
    freed += buckets[(second + seconds) % SECONDS] as number;
    if (used - freed + amount <= allowed) break;
  }
  return { limit, allowed, used, retryAfterS: Math.min(SECONDS, seconds) };
}
