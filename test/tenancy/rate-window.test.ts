import { describe, expect, it } from 'vitest';
import { MinuteWindows } from '../../src/tenancy/rate-window.js';
import type { Tenant } from '../../src/tenancy/tenants.js';

const tenant = (limits: Partial<Tenant>): Tenant => ({
  name: 'a',
  priority: 0,
  requestsPerMinute: undefined,
  tokensPerMinute: undefined,
  maxConcurrent: undefined,
  ...limits,
});

describe('per-minute limits of a tenant', () => {
  it('counts requests up to the limit, then says which limit and when it frees up, second by second', () => {
    let now = 1_000_000;
    const windows = new MinuteWindows(() => now);
    const limited = tenant({ requestsPerMinute: 3 });
    expect(windows.take(limited, 0)).toBeUndefined();
    now += 10_000;
    expect(windows.take(limited, 0)).toBeUndefined();
    expect(windows.take(limited, 0)).toBeUndefined();
    expect(windows.take(limited, 0)).toEqual({ limit: 'requestsPerMinute', allowed: 3, used: 3, retryAfterS: 50 });
    expect(windows.used('a')).toEqual({ requests: 3, tokens: 0 });
    now += 50_000; // the first request's second has left the minute
    expect(windows.take(limited, 0)).toBeUndefined();
    expect(windows.take(limited, 0)).toMatchObject({ limit: 'requestsPerMinute', retryAfterS: 10 });
  });

  it('tokens: an estimate is counted at once and corrected by the answer; a request over the limit counts nothing', () => {
    let now = 0;
    const windows = new MinuteWindows(() => now);
    const limited = tenant({ tokensPerMinute: 1000 });
    expect(windows.take(limited, 600)).toBeUndefined();
    expect(windows.take(limited, 600)).toMatchObject({ limit: 'tokensPerMinute', used: 600 });
    windows.correct(limited, -300); // the answer used less than estimated
    expect(windows.take(limited, 600)).toBeUndefined();
    expect(windows.used('a')).toEqual({ requests: 2, tokens: 900 });
    now += 61_000;
    expect(windows.used('a')).toEqual({ requests: 0, tokens: 0 });
  });

  it('a tenant without limits is not counted', () => {
    const windows = new MinuteWindows(() => 0);
    const free = tenant({});
    for (let i = 0; i < 10; i++) expect(windows.take(free, 1e9)).toBeUndefined();
    windows.correct(free, 5);
    expect(windows.used('a')).toEqual({ requests: 0, tokens: 0 });
  });
});
