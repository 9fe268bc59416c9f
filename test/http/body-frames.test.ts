import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { BodyFrames, type FrameSink } from '../../src/http/body-frames.js';
import { propertyOptions } from '../support/property.js';

function recorder(): FrameSink & { seen: string[] } {
  const seen: string[] = [];
  return {
    seen,
    frame: (text, form) => seen.push(`${form}:${text}`),
    done() {
      seen.push('done');
    },
    errorEvent: (data) => seen.push(`error:${data}`),
    emptyBody: () => seen.push('empty'),
  };
}

function feedAll(mode: 'sse' | 'json', bytes: Buffer, cuts: number[]): string[] {
  const sink = recorder();
  const frames = new BodyFrames(mode, sink);
  let at = 0;
  for (const cut of [...new Set(cuts.map((c) => c % (bytes.length + 1)))].sort((a, b) => a - b)) {
    frames.feed(bytes.subarray(at, cut));
    at = cut;
  }
  frames.feed(bytes.subarray(at));
  frames.end();
  return sink.seen;
}

describe('BodyFrames: bytes to frames', () => {
  it('an event stream: data events, an error event, [DONE]; a last event without its blank line still counts', () => {
    const body = Buffer.from('data: {"a":1}\n\nevent: error\ndata: {"e":2}\n\ndata: [DONE]\n\ndata: {"late":3}');
    expect(feedAll('sse', body, [])).toEqual(['event:{"a":1}', 'error:{"e":2}', 'done', 'event:{"late":3}']);
  });

  it('a JSON body is one frame at its end; an empty one says so', () => {
    expect(feedAll('json', Buffer.from('{"a":\n1}'), [3])).toEqual(['body:{"a":\n1}']);
    expect(feedAll('json', Buffer.from(' \n'), [])).toEqual(['empty']);
  });

  it('however the bytes are cut (inside a character, a line ending, a field), the frames are the same', () => {
    const body = Buffer.from('data: {"t":"héllo 世界 🙂"}\r\n\r\ndata: {"t":"ß"}\n\n: comment\n\ndata: [DONE]\n\n');
    const whole = feedAll('sse', body, []);
    expect(whole).toEqual(['event:{"t":"héllo 世界 🙂"}', 'event:{"t":"ß"}', 'done']);
    fc.assert(
      fc.property(fc.array(fc.nat(body.length), { maxLength: 12 }), (cuts) => {
        expect(feedAll('sse', body, cuts)).toEqual(whole);
        expect(feedAll('json', Buffer.from('{"t":"世界 🙂"}'), cuts)).toEqual(['body:{"t":"世界 🙂"}']);
      }),
      propertyOptions(300, 37),
    );
  });

  it('a byte order mark at the start of a body is not part of it, however the bytes are cut; bad bytes are U+FFFD', () => {
    const bom = Buffer.from([0xef, 0xbb, 0xbf]);
    const sse = Buffer.concat([bom, Buffer.from('data: {"a":"\ufeff"}\n\ndata: [DONE]\n\n')]);
    const json = Buffer.concat([bom, Buffer.from('{"t":"世"}')]);
    fc.assert(
      fc.property(fc.array(fc.nat(sse.length), { maxLength: 6 }), (cuts) => {
        // Only the first mark goes: one inside the text is the worker's.
        expect(feedAll('sse', sse, cuts)).toEqual(['event:{"a":"\ufeff"}', 'done']);
        expect(feedAll('json', json, cuts)).toEqual(['body:{"t":"世"}']);
      }),
      propertyOptions(100, 41),
    );
    // A character cut short at the end of a JSON body, and a byte that starts none.
    expect(feedAll('json', Buffer.from([0x7b, 0xff, 0x7d, 0xe4, 0xb8]), [])).toEqual(['body:{\ufffd}\ufffd']);
  });
});
