import { describe, expect, it } from 'vitest';
import { newResponseId, ResponseHomes } from '../../../src/server/pipeline/response-homes.js';

const worker = (name: string) => ({ url: `http://${name}:8000` });

describe("the router's book of Responses ids", () => {
  it('an id is found again only by the tenant that claimed it, once its request was answered', () => {
    const homes = new ResponseHomes<{ url: string }>();
    const d0 = worker('d0');
    expect(homes.claim('resp_a', 'alice')).toBe(true);
    // Under way: nobody finds it yet.
    expect(homes.homeOf('resp_a', 'alice')).toBeUndefined();
    homes.settle('resp_a', 'resp_a', d0);
    expect(homes.homeOf('resp_a', 'alice')).toBe(d0);
    expect(homes.homeOf('resp_a', 'bob')).toBeUndefined();
  });

  it('no request may take an id already known, served or under way, whoever it belongs to', () => {
    const homes = new ResponseHomes<{ url: string }>();
    const d0 = worker('d0');
    expect(homes.claim('resp_served', 'alice')).toBe(true);
    homes.settle('resp_served', 'resp_served', d0);
    expect(homes.claim('resp_served', 'bob')).toBe(false);
    expect(homes.claim('resp_served', 'alice')).toBe(false);
    expect(homes.claim('resp_pending', 'alice')).toBe(true);
    expect(homes.claim('resp_pending', 'bob')).toBe(false);
    // Alice's answer still lives where it was served.
    expect(homes.homeOf('resp_served', 'alice')).toBe(d0);
  });

  it('a request that was not answered lets its id go', () => {
    const homes = new ResponseHomes<{ url: string }>();
    homes.claim('resp_failed', 'alice');
    homes.settle('resp_failed', undefined, undefined);
    expect(homes.size.entries).toBe(0);
    expect(homes.claim('resp_failed', 'bob')).toBe(true);
  });

  it("an engine that names its answer itself: the answer's id is remembered for the claimer, the claimed one let go", () => {
    const homes = new ResponseHomes<{ url: string }>();
    const d1 = worker('d1');
    homes.claim('resp_asked', 'alice');
    homes.settle('resp_asked', 'resp_engine', d1);
    expect(homes.homeOf('resp_engine', 'alice')).toBe(d1);
    expect(homes.homeOf('resp_asked', 'alice')).toBeUndefined();
    expect(homes.size.entries).toBe(1);
  });

  it("a worker answering with an id already known does not re-point it: the first owner's stays", () => {
    const homes = new ResponseHomes<{ url: string }>();
    const [d0, d1] = [worker('d0'), worker('d1')];
    homes.claim('resp_alice', 'alice');
    homes.settle('resp_alice', 'resp_alice', d0);
    homes.claim('resp_bob', 'bob');
    homes.settle('resp_bob', 'resp_alice', d1);
    expect(homes.homeOf('resp_alice', 'alice')).toBe(d0);
    expect(homes.homeOf('resp_alice', 'bob')).toBeUndefined();
  });

  it('bounded by entries: the oldest is forgotten first', () => {
    const homes = new ResponseHomes<{ url: string }>({ entries: 3 });
    for (const id of ['a', 'b', 'c', 'd']) {
      homes.claim(id, 't');
      homes.settle(id, id, worker(id));
    }
    expect(homes.size.entries).toBe(3);
    expect(homes.homeOf('a', 't')).toBeUndefined();
    expect(homes.homeOf('d', 't')).toEqual(worker('d'));
  });

  it('bounded in bytes as well: long ids and owners hold no more than the budget', () => {
    const homes = new ResponseHomes<{ url: string }>({ bytes: 10_000 });
    for (let i = 0; i < 1_000; i++) {
      const id = `${String(i).padStart(4, '0')}${'x'.repeat(200)}`;
      homes.claim(id, 'a-tenant-with-a-long-name');
      homes.settle(id, id, worker('d0'));
    }
    expect(homes.size.bytes).toBeLessThanOrEqual(10_000);
    expect(homes.size.entries).toBeGreaterThan(0);
    expect(homes.size.entries).toBeLessThan(1_000);
  });

  it('an id longer than any the router or a client makes is never remembered', () => {
    const homes = new ResponseHomes<{ url: string }>();
    expect(homes.claim('x'.repeat(257), 'alice')).toBe(false);
    homes.claim('resp_short', 'alice');
    homes.settle('resp_short', 'y'.repeat(100_000), worker('d0'));
    expect(homes.size.entries).toBe(0);
  });

  it("the router's own ids: resp_ and 128 random bits, never the same twice", () => {
    const ids = new Set(Array.from({ length: 1_000 }, newResponseId));
    expect(ids.size).toBe(1_000);
    for (const id of ids) expect(id).toMatch(/^resp_[0-9a-f]{32}$/);
  });
});
