// docs/alerts.md, the runbook of the alerts deploy/ ships: a section per alert and an alert per
// section (each rule's runbook_url lands on one), and every PromQL expression it tells an
// operator to run is valid and names what the proxy exports.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { parseTenants } from '../../src/tenancy/tenants.js';
import { promtoolCheck, rules } from '../support/alert-rules.js';
import { exported, problems } from '../support/exported-metrics.js';
import { tool } from '../support/tools.js';

const root = fileURLToPath(new URL('../..', import.meta.url));
const page = readFileSync(join(root, 'docs/alerts.md'), 'utf8');
const promtool = tool('promtool', 'prometheus');

/** The page's fenced blocks: their language (empty when none) and their text. */
const blocks = [...page.matchAll(/^```(.*)\n([\s\S]*?)^```$/gm)].map(([, lang, text]) => ({
  lang: lang as string,
  text: text as string,
}));
const promql = blocks.filter((block) => block.lang === 'promql').map((block) => block.text.trim());
/** The page's sections: an alert's name each, whose anchor (GitHub's) is the name in lower case. */
const sections = [...page.matchAll(/^## (.+)$/gm)].map(([, heading]) => heading as string);

describe('docs/alerts.md, the runbook of the alerts', () => {
  it('has a section per alert, in the rule file order, and no section without an alert', () => {
    expect(sections).toEqual(rules.map((each) => each.alert));
  });

  it("lands each alert's runbook_url on its section", () => {
    const anchors = new Set(sections.map((heading) => heading.toLowerCase()));
    for (const each of rules) {
      const [file, anchor] = (each.annotations.runbook_url ?? '').split('#');
      expect(file, each.alert).toBe('docs/alerts.md');
      expect(anchors.has(anchor as string), each.alert).toBe(true);
    }
  });

  it('gives every code block its language', () => {
    expect(blocks.length).toBeGreaterThan(30);
    for (const block of blocks) expect(block.lang, block.text).toMatch(/^(ts|sh|yaml|json|promql|text)$/);
  });

  it('names in its PromQL only metrics the proxy exports, with labels they have', async () => {
    const names = await exported();
    expect(promql.length).toBeGreaterThan(20);
    expect(promql.flatMap((expr) => problems(expr, names))).toEqual([]);
  });

  it.skipIf(promtool.skip)(`has only PromQL that Prometheus takes (${promtool.why})`, () => {
    const record = promql.map((expr, i) => ({ record: `runbook:query_${i}`, expr }));
    expect(promtoolCheck([{ name: 'runbook', rules: record }])).toContain(`SUCCESS: ${promql.length} rules found`);
  });

  it('shows tenants files the proxy reads', () => {
    const files = blocks.filter((block) => block.lang === 'yaml' && /^tenants:/m.test(block.text));
    expect(files.length).toBeGreaterThan(0);
    for (const file of files) expect(() => parseTenants(file.text, 'tenants.yaml')).not.toThrow();
  });
});
