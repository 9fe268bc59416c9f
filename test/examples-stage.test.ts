import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const root = fileURLToPath(new URL('..', import.meta.url));
const read = (path: string) => readFileSync(`${root}/${path}`, 'utf8');

describe("the library guide's stage of your own", () => {
  it("is examples/stage.ts, word for word, and it refuses a request without a team and counts each team's tokens", () => {
    const block = /## Stages of your own\n[\s\S]*?```ts\n([\s\S]*?)```/.exec(read('docs/library.md'))?.[1];
    expect(block).toBe(read('examples/stage.ts'));
    const run = spawnSync(process.execPath, ['--import', 'tsx', 'examples/stage.ts'], { cwd: root, encoding: 'utf8' });
    expect(run.stderr).toBe('');
    expect(run.stdout).toBe('400 Name your team in x-team\n{ search: 6, ads: 3 }\n');
  });
});
