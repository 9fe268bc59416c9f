import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ItemList, type StoredItem } from '../../src/agent-state/memory-items.js';
import { propertyOptions } from '../support/property.js';

function stored(id: string): StoredItem {
  const json = JSON.stringify({ id });
  return { id, json, bytes: Buffer.byteLength(json) };
}
const idOf = (json: string | undefined): string | undefined =>
  json === undefined ? undefined : (JSON.parse(json) as { id: string }).id;
const ids = (page: { items: string[] }) => page.items.map(idOf);

/** Every page of `list` in `order`, `limit` at a time, each from the last one's cursor. */
function walk(list: ItemList, order: 'asc' | 'desc', limit: number): Array<string | undefined> {
  const seen: Array<string | undefined> = [];
  for (let after: string | undefined; ; ) {
    const page = list.page({ after, limit, order });
    seen.push(...ids(page));
    if (!page.hasMore) return seen;
    after = seen.at(-1);
  }
}

describe('ItemList', () => {
  it('pages from a cursor in either order after most of a long conversation was deleted (holes filled in)', () => {
    const list = new ItemList();
    list.append(Array.from({ length: 1_000 }, (_, i) => stored(`msg_${i}`)));
    const kept: string[] = [];
    for (let i = 0; i < 1_000; i++) {
      if (i % 10 === 0) kept.push(`msg_${i}`);
      else expect(list.delete(`msg_${i}`)).toBe(stored(`msg_${i}`).bytes);
    }
    expect(list.size).toBe(100);
    expect(walk(list, 'asc', 7)).toEqual(kept);
    expect(walk(list, 'desc', 7)).toEqual([...kept].reverse());
    expect(ids(list.page({ after: 'msg_500', limit: 2, order: 'asc' }))).toEqual(['msg_510', 'msg_520']);
    expect(idOf(list.get('msg_990'))).toBe('msg_990');
    expect(list.get('msg_991')).toBeUndefined();
  });

  it('whatever the appends and deletes, it holds, finds and pages exactly what an array would', () => {
    // Deletes outnumber appends, so that holes come to outnumber the items and are filled in.
    const step = fc.oneof(
      { arbitrary: fc.record({ append: fc.integer({ min: 1, max: 6 }) }), weight: 1 },
      { arbitrary: fc.record({ remove: fc.nat(), held: fc.constant(true) }), weight: 3 },
      { arbitrary: fc.record({ remove: fc.nat(), held: fc.constant(false) }), weight: 1 },
    );
    const query = fc.record({ after: fc.integer({ min: -1, max: 200 }), limit: fc.integer({ min: 0, max: 15 }) });
    fc.assert(
      fc.property(
        fc.array(step, { minLength: 40, maxLength: 150, size: 'max' }),
        query,
        fc.boolean(),
        (steps, asked, asc) => {
          const list = new ItemList();
          const model: string[] = [];
          let next = 0;
          for (const one of steps) {
            if ('append' in one) {
              const added = Array.from({ length: one.append }, () => `msg_${next++}`);
              list.append(added.map(stored));
              model.push(...added);
            } else {
              const id =
                one.held && model.length > 0 ? (model[one.remove % model.length] as string) : `msg_${one.remove}`;
              const at = model.indexOf(id);
              expect(list.delete(id)).toBe(at === -1 ? undefined : stored(id).bytes);
              expect(list.get(id)).toBeUndefined();
              if (at !== -1) model.splice(at, 1);
            }
          }
          expect(list.size).toBe(model.length);
          expect(walk(list, 'asc', 4)).toEqual(model);
          const order = asc ? 'asc' : 'desc';
          const after = asked.after === -1 ? undefined : `msg_${asked.after}`;
          const ordered = asc ? model : [...model].reverse();
          const from = after === undefined ? 0 : ordered.indexOf(after) + 1;
          const page = list.page({ after, limit: asked.limit, order });
          if (after !== undefined && !model.includes(after)) expect(page).toEqual({ items: [], hasMore: false });
          else {
            expect(ids(page)).toEqual(ordered.slice(from, from + asked.limit));
            expect(page.hasMore).toBe(from + asked.limit < ordered.length);
          }
        },
      ),
      propertyOptions(300, 71),
    );
  });
});
