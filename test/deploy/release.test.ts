// .github/workflows/release.yml cannot run here: what it runs is checked against what the
// suite has (its npm scripts, the Dockerfile, the tools the tests need), and its image and
// package are the version the tag names.
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';

const root = fileURLToPath(new URL('../..', import.meta.url));
const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));

type Step = {
  id?: string;
  name?: string;
  uses?: string;
  run?: string;
  with?: Record<string, string | boolean>;
  env?: Record<string, string>;
};
const workflow = parse(readFileSync(join(root, '.github/workflows/release.yml'), 'utf8'));
const steps = Object.values(workflow.jobs as Record<string, { steps: Step[] }>).flatMap((job) => job.steps);
const runs = steps.flatMap((step) => step.run?.split('\n').map((line) => line.trim()) ?? []);
const uses = (action: string) => steps.filter((step) => step.uses?.startsWith(`${action}@`));

/** Every `tool(command, debianPackage)` the tests call: what the run must install. */
function testTools(): Map<string, string> {
  const tools = new Map<string, string>();
  const walk = (dir: string) => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) walk(path);
      else if (entry.name.endsWith('.ts')) {
        for (const call of readFileSync(path, 'utf8').matchAll(/\btool\('([\w-]+)', '([\w-]+)'\)/g)) {
          tools.set(call[1] as string, call[2] as string);
        }
      }
    }
  };
  walk(join(root, 'test'));
  return tools;
}

describe('the release workflow', () => {
  it('runs on a tag v*, and stops unless the tag is v<package version>', () => {
    expect(workflow.on.push.tags).toEqual(['v*']);
    const check = steps.find((step) => step.id === 'version');
    expect(check?.run).toContain(`node -p 'require("./package.json").version'`);
    expect(check?.run).toMatch(/"\$GITHUB_REF_NAME" != "v\$version"[\s\S]*exit 1/);
  });

  it('runs the npm scripts the suite has: npm ci, then the whole npm test with the test tools required', () => {
    const npm = runs.filter((line) => line.startsWith('npm '));
    expect(npm).toEqual(['npm ci', 'npm test', 'npm publish --provenance --access public --ignore-scripts']);
    expect(pkg.scripts.test).toBeDefined();
    for (const line of runs) {
      const script = /^npm run ([\w:-]+)/.exec(line)?.[1];
      if (script !== undefined) expect(pkg.scripts[script], line).toBeDefined();
    }
    const test = steps.find((step) => step.run === 'npm test');
    expect(test?.env?.REQUIRE_TEST_TOOLS).toBe('1');
    // Each tool the tests need is installed by its package, or already on the runner and checked.
    const install = runs.find((line) => line.includes('apt-get install')) ?? '';
    for (const [command, debianPackage] of testTools()) {
      const present =
        install.split(/\s+/).includes(debianPackage) || runs.some((line) => line.startsWith(`${command} `));
      expect(present, `${command} (${debianPackage})`).toBe(true);
    }
    // The published package holds what npm test built and checked: the build comes before it.
    expect(steps.findIndex((step) => step.run === 'npm test')).toBeLessThan(
      steps.findIndex((step) => step.run?.startsWith('npm publish') === true),
    );
  });

  it('builds deploy/Dockerfile and pushes it to ghcr.io as <owner>/disagg:<version>', () => {
    const [build] = uses('docker/build-push-action');
    expect(build?.with?.file).toBe('deploy/Dockerfile');
    expect(existsSync(join(root, build?.with?.file as string))).toBe(true);
    expect(build?.with?.context).toBe('.');
    expect(build?.with?.push).toBe(true);
    expect(build?.with?.tags).toBe(
      // biome-ignore lint/suspicious/noTemplateCurlyInString: GitHub Actions expressions, read as the workflow has them
      'ghcr.io/${{ steps.version.outputs.owner }}/disagg:${{ steps.version.outputs.version }}',
    );
    expect(uses('docker/login-action')[0]?.with?.registry).toBe('ghcr.io');
    expect(workflow.permissions.packages).toBe('write');
  });

  it('publishes to npm with provenance, which needs the OIDC token', () => {
    expect(runs).toContain('npm publish --provenance --access public --ignore-scripts');
    expect(workflow.permissions['id-token']).toBe('write');
    const setup = uses('actions/setup-node')[0];
    expect(setup?.with?.['registry-url']).toBe('https://registry.npmjs.org');
    // The Node of the image's build stage.
    const dockerfile = readFileSync(join(root, 'deploy/Dockerfile'), 'utf8');
    expect(dockerfile).toContain(`FROM node:${setup?.with?.['node-version']}-`);
  });
});
