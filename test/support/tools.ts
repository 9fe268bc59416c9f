import { spawnSync } from 'node:child_process';

/**
 * Whether a command-line tool a test needs is here (`kubectl`, `promtool`). Where it is not, the
 * test is skipped and says which Debian package brings it, so that `npm ci && npm test` passes
 * on any machine; CI installs the packages and sets REQUIRE_TEST_TOOLS=1, and there a missing
 * tool fails the run instead of skipping what it checks.
 */
export function tool(command: string, debianPackage: string): { present: boolean; skip: boolean; why: string } {
  const probe = spawnSync(command, ['--help'], { stdio: 'ignore' });
  const present = probe.error === undefined;
  const required = process.env.REQUIRE_TEST_TOOLS === '1';
  if (!present && required) {
    throw new Error(`${command} is not installed but REQUIRE_TEST_TOOLS=1: apt-get install ${debianPackage}`);
  }
  return {
    present,
    skip: !present,
    why: present ? command : `${command} not installed (apt-get install ${debianPackage}): skipped`,
  };
}

/** Runs `command` and returns its output; throws with both streams when it fails. */
export function run(command: string, args: string[], options: { cwd?: string } = {}): string {
  const result = spawnSync(command, args, { encoding: 'utf8', ...options });
  if (result.error !== undefined) throw result.error;
  if (result.status !== 0) {
    throw new Error(`${command} ${args.join(' ')} exited ${result.status}:\n${result.stdout}\n${result.stderr}`);
  }
  return result.stdout;
}
