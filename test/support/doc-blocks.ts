// The documentation as the suite reads it: the pages (README.md and docs/*.md), their fenced
// blocks with the check each asks for, their links, and the commands of a shell block as a shell
// would split them (quotes across lines, backslash continuations, comments, `&&`, `|`, `&`).
import { readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

export const root = fileURLToPath(new URL('../..', import.meta.url));

/** The pages the suite holds true: the README and every page of docs/ (repository-relative). */
export function docPages(): string[] {
  const docs = readdirSync(`${root}docs`)
    .filter((name) => name.endsWith('.md'))
    .sort()
    .map((name) => `docs/${name}`);
  return ['README.md', ...docs];
}

/** A fenced block of a page: its language, its text (indentation of a list item removed). */
export interface DocBlock {
  page: string;
  /** 1-based line of the opening fence. */
  line: number;
  /** What follows the opening fence; '' when none. */
  lang: string;
  code: string;
  /** `<!-- check: skip (why) -->` on the line before the fence: the block is not checked. */
  skip: { reason: string } | undefined;
  /** A `check:` comment that does not say `skip (a reason)`: reported, never honoured. */
  badDirective: string | undefined;
}

/** Every fenced block of `page` (a path relative to the repository), in order. */
export function fencedBlocks(page: string): DocBlock[] {
  const lines = readFileSync(`${root}${page}`, 'utf8').split('\n');
  const blocks: DocBlock[] = [];
  for (let i = 0; i < lines.length; i++) {
    const open = /^(\s*)(`{3,})\s*([^`\s]*)\s*$/.exec(lines[i] as string);
    if (open === null) continue;
    const [, indent = '', fence = '```', lang = ''] = open;
    const body: string[] = [];
    let j = i + 1;
    for (; j < lines.length; j++) {
      const line = lines[j] as string;
      if (new RegExp(`^\\s*${fence}\\s*$`).test(line)) break;
      body.push(line.startsWith(indent) ? line.slice(indent.length) : line.trimStart());
    }
    const previous = (lines[i - 1] ?? '').trim();
    const directive = /^<!--\s*check:(.*?)-->$/.exec(previous)?.[1]?.trim();
    const skip = directive === undefined ? undefined : /^skip \((.{8,})\)$/.exec(directive);
    blocks.push({
      page,
      line: i + 1,
      lang,
      code: `${body.join('\n')}\n`,
      skip: skip ? { reason: skip[1] as string } : undefined,
      badDirective: directive !== undefined && !skip ? directive : undefined,
    });
    i = j;
  }
  return blocks;
}

/** One simple command of a shell block: its words, with leading `NAME=value` as its env. */
export interface ShellCommand {
  argv: string[];
  env: Record<string, string>;
  /** The operator that ended it (`|` for the left side of a pipe), or '' at a line's end. */
  operator: string;
  /** The command as the block spells it (continuations joined), for messages. */
  text: string;
  /** The text of its here-document (`cat > f <<'EOF'` ... `EOF`), if it has one. */
  heredoc?: string;
}

/**
 * The commands of a shell block, split as sh splits them: single and double quotes (which may
 * span lines), a backslash before a newline joining lines, `#` starting a comment at a word's
 * start, and `;`, `&&`, `||`, `|`, `&` and newlines ending a command. A here-document
 * (`<<'EOF'` up to the line `EOF`) is the command's `heredoc`, not commands of its own.
 * Variables are kept as written (`$KEY`): nothing is expanded.
 */
export function shellCommands(code: string): ShellCommand[] {
  const commands: ShellCommand[] = [];
  let words: string[] = [];
  let word: string | undefined;
  let start = 0;
  let heredoc: { delimiter: string; body?: string } | undefined;
  const endWord = () => {
    if (word !== undefined) words.push(word);
    word = undefined;
  };
  const endCommand = (operator: string, at: number) => {
    endWord();
    if (words.length > 0) {
      const env: Record<string, string> = {};
      while (words.length > 0 && /^[A-Za-z_]\w*=/.test(words[0] as string)) {
        const [name, ...value] = (words.shift() as string).split('=');
        env[name as string] = value.join('=');
      }
      const text = code
        .slice(start, at)
        .replace(/\\\n\s*/g, '')
        .trim();
      if (words.length > 0)
        commands.push({
          argv: words,
          env,
          operator,
          text,
          ...(heredoc?.body === undefined ? {} : { heredoc: heredoc.body }),
        });
      heredoc = undefined;
    }
    words = [];
    start = at + operator.length;
  };
  for (let i = 0; i < code.length; i++) {
    const c = code[i] as string;
    if (c === '\\' && code[i + 1] === '\n') {
      i++;
      continue;
    }
    if (c === '<' && code[i + 1] === '<' && word === undefined) {
      // The delimiter, quoted or not; the body starts on the next line and ends at its own line.
      const match = /^<<-?\s*(['"]?)(\w+)\1/.exec(code.slice(i));
      if (match === null) throw new Error(`a here-document without a delimiter in:\n${code}`);
      heredoc = { delimiter: match[2] as string };
      i += match[0].length - 1;
      continue;
    }
    if (c === '\n' && heredoc !== undefined && heredoc.body === undefined) {
      const lines = code.slice(i + 1).split('\n');
      const end = lines.findIndex((line) => line.trim() === heredoc?.delimiter);
      if (end < 0) throw new Error(`a here-document never closed (${heredoc.delimiter}) in:\n${code}`);
      heredoc.body = `${lines.slice(0, end).join('\n')}\n`;
      endCommand('', i);
      // On to the delimiter's last character: the newline after it ends nothing but that line.
      i += lines.slice(0, end + 1).join('\n').length;
      continue;
    }
    if (c === '\\') {
      word = (word ?? '') + (code[i + 1] ?? '');
      i++;
    } else if (c === "'") {
      const end = code.indexOf("'", i + 1);
      if (end < 0) throw new Error(`an unclosed ' in:\n${code}`);
      word = (word ?? '') + code.slice(i + 1, end);
      i = end;
    } else if (c === '"') {
      let text = '';
      let j = i + 1;
      for (; j < code.length && code[j] !== '"'; j++) {
        if (code[j] === '\\' && /["\\$`]/.test(code[j + 1] ?? '')) j++;
        text += code[j];
      }
      if (j >= code.length) throw new Error(`an unclosed " in:\n${code}`);
      word = (word ?? '') + text;
      i = j;
    } else if (c === '#' && word === undefined) {
      const end = code.indexOf('\n', i);
      i = (end < 0 ? code.length : end) - 1;
    } else if (c === ' ' || c === '\t') {
      endWord();
    } else if (c === '\n' || c === ';') {
      endCommand(c === ';' ? ';' : '', i);
    } else if (c === '&' || c === '|') {
      const two = code.slice(i, i + 2);
      const op = two === '&&' || two === '||' ? two : c;
      endCommand(op, i);
      i += op.length - 1;
    } else {
      word = (word ?? '') + c;
    }
  }
  endCommand('', code.length);
  return commands;
}

/** A relative link of a page: its target file (repository-relative) and `#anchor`, if any. */
export interface DocLink {
  page: string;
  line: number;
  target: string;
  file: string;
  anchor: string | undefined;
}

/** The relative links of `page` (Markdown `[text](target)`), outside fenced blocks and code spans. */
export function relativeLinks(page: string): DocLink[] {
  const lines = readFileSync(`${root}${page}`, 'utf8').split('\n');
  const dir = page.includes('/') ? page.slice(0, page.lastIndexOf('/') + 1) : '';
  const links: DocLink[] = [];
  let fenced = false;
  lines.forEach((raw, i) => {
    if (/^\s*```/.test(raw)) fenced = !fenced;
    if (fenced) return;
    const line = raw.replace(/`[^`]*`/g, '');
    for (const match of line.matchAll(/\]\(([^)\s]+)\)/g)) {
      const target = match[1] as string;
      if (/^[a-z][a-z0-9+.-]*:/i.test(target)) continue; // https:, mailto:
      const [path = '', anchor] = target.split('#');
      links.push({ page, line: i + 1, target, file: path === '' ? page : normalise(dir + path), anchor });
    }
  });
  return links;
}

function normalise(path: string): string {
  const parts: string[] = [];
  for (const part of path.split('/')) {
    if (part === '..') parts.pop();
    else if (part !== '.' && part !== '') parts.push(part);
  }
  return parts.join('/');
}

/**
 * The anchors GitHub gives a page's headings: lower case, punctuation but `-` and `_` dropped,
 * spaces as `-`, a repeated one numbered (`-1`, `-2`).
 */
export function headingAnchors(page: string): Set<string> {
  const anchors = new Set<string>();
  const seen = new Map<string, number>();
  let fenced = false;
  for (const line of readFileSync(`${root}${page}`, 'utf8').split('\n')) {
    if (/^\s*```/.test(line)) fenced = !fenced;
    const heading = fenced ? null : /^#{1,6}\s+(.*?)\s*#*\s*$/.exec(line);
    if (heading === null) continue;
    const slug = (heading[1] as string)
      .toLowerCase()
      .replace(/<[^>]*>/g, '')
      .replace(/[^\p{L}\p{N}\s_-]/gu, '')
      .replace(/\s/g, '-');
    const count = seen.get(slug) ?? 0;
    seen.set(slug, count + 1);
    anchors.add(count === 0 ? slug : `${slug}-${count}`);
  }
  return anchors;
}
