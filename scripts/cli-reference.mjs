#!/usr/bin/env node
// `npm run docs:cli`: writes `disagg serve --help` into docs/cli-reference.md, between its
// markers, so that the reference on the web is the help the binary prints.
// test/server/options.test.ts fails when the two differ.
import { readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { SERVE_USAGE } from '../src/server/config.ts';

const path = fileURLToPath(new URL('../docs/cli-reference.md', import.meta.url));
const BEGIN = '<!-- disagg serve --help: begin (npm run docs:cli) -->';
const END = '<!-- disagg serve --help: end -->';
const text = readFileSync(path, 'utf8');
const start = text.indexOf(BEGIN);
const end = text.indexOf(END);
if (start === -1 || end < start) {
  console.error(`cli-reference: ${path} lacks the markers ${BEGIN} ... ${END}`);
  process.exit(1);
}
writeFileSync(path, `${text.slice(0, start + BEGIN.length)}\n\`\`\`text\n${SERVE_USAGE}\`\`\`\n${text.slice(end)}`);
console.log(`cli-reference: wrote disagg serve --help into ${path}`);
