import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

// docs/troubleshooting.md quotes the proxy's messages in `text` blocks: each line must still be
// said by the source, so that the page cannot go stale. A line is the message with its values
// as `<placeholders>`, and may start with the command's own prefix (`disagg serve: `). The
// pieces between placeholders are looked for in the source (in the source they sit between
// `${...}`); a piece's edge punctuation (quotes, colons) is left out, since the source writes
// it around a value as often as in the text.
const root = fileURLToPath(new URL('../..', import.meta.url));

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return sources(path);
    return /\.(ts|mjs)$/.test(entry.name) ? [readFileSync(path, 'utf8')] : [];
  });
}

/** The lines of the page's `text` blocks. */
function quotedLines(page: string): string[] {
  const lines: string[] = [];
  for (const [, block] of page.matchAll(/```text\n([\s\S]*?)```/g)) {
    lines.push(...(block as string).split('\n').filter((line) => line.trim() !== ''));
  }
  return lines;
}

/** The pieces of a quoted line to find in the source: what is between its placeholders. */
function piecesOf(line: string): string[] {
  return line
    .replace(/^disagg (serve|sidecar|epp): /, '')
    .split(/<[^>]*>/)
    .map((piece) => piece.replace(/^[\s"'`:;,.?()]+|[\s"'`:;,.?()]+$/g, ''))
    .filter((piece) => piece.length >= 3);
}

/** The pieces of `line` that no source file holds. */
function missingPieces(line: string, source: string[]): string[] {
  return piecesOf(line).filter((piece) => !source.some((file) => file.includes(piece)));
}

describe('docs/troubleshooting.md', () => {
  const page = readFileSync(join(root, 'docs/troubleshooting.md'), 'utf8');
  const source = sources(join(root, 'src'));

  it('quotes only messages the source still says', () => {
    const lines = quotedLines(page);
    expect(lines.length).toBeGreaterThan(40);
    const stale = lines.filter((line) => missingPieces(line, source).length > 0);
    expect(stale).toEqual([]);
  });

  it('a message the source does not say, or says otherwise, is caught', () => {
    expect(missingPieces('Worker failed its health check (<why>); out of rotation', source)).toEqual([]);
    expect(missingPieces('Worker failed its health check (<why>); out of the fleet for good', source)).toEqual([
      'out of the fleet for good',
    ]);
    expect(missingPieces('No <pool> worker is gone: all <n> of the pool', source)).toEqual(['worker is gone: all']);
    expect(piecesOf("disagg serve: <path>: a key of <tenant> is also <tenant>'s")).toEqual(['a key of', 'is also']);
  });

  it('every fenced block says its language', () => {
    const fences = [...page.matchAll(/^```(\S*)$/gm)].map((match) => match[1]);
    // Opening fences carry a language; the closing ones are bare: every other one.
    expect(fences.filter((_, i) => i % 2 === 0).every((language) => language !== '')).toBe(true);
  });
});
