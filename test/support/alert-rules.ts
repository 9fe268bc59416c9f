// The alert rules deploy/ ships (deploy/kubernetes/monitoring/prometheus-rule.yaml), as the
// tests read them: the rules, and promtool's `test rules` run over series given in a test.
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parse, stringify } from 'yaml';
import { run } from './tools.js';

const root = fileURLToPath(new URL('../..', import.meta.url));

/** One alerting rule as the PrometheusRule writes it. */
export type Rule = {
  alert: string;
  expr: string;
  for?: string;
  labels: Record<string, string>;
  annotations: Record<string, string>;
};

/** The PrometheusRule's `spec.groups`: a Prometheus rules file as it stands. */
export const ruleGroups: Array<{ name: string; rules: Rule[] }> = parse(
  readFileSync(join(root, 'deploy/kubernetes/monitoring/prometheus-rule.yaml'), 'utf8'),
).spec.groups;

/** Every alerting rule, in the file's order. */
export const rules: Rule[] = ruleGroups.flatMap((group) => group.rules);

/** The rule named `alert` (throws if there is none: a test names one that exists). */
export function ruleNamed(alert: string): Rule {
  const found = rules.find((each) => each.alert === alert);
  if (found === undefined) throw new Error(`no alert ${alert} in prometheus-rule.yaml`);
  return found;
}

/** What promtool expects of an alert that fires: its labels, and its annotations as written. */
export function firing(alert: string, labels: Record<string, string>, summary: string) {
  const { description, runbook_url } = ruleNamed(alert).annotations;
  return {
    exp_labels: labels,
    exp_annotations: { summary, description, ...(runbook_url === undefined ? {} : { runbook_url }) },
  };
}

/** A `promtool test rules` case: series over time, and the alerts expected at given times. */
export type RuleTest = {
  interval: string;
  input_series: Array<{ series: string; values: string }>;
  alert_rule_test: Array<{ eval_time: string; alertname: string; exp_alerts: unknown[] }>;
};

/** Runs `promtool test rules` on `tests` against the rules file: its output (throws on a failure). */
export function promtoolTest(tests: RuleTest[]): string {
  const dir = mkdtempSync(join(tmpdir(), 'disagg-alerts-'));
  writeFileSync(join(dir, 'rules.yaml'), stringify({ groups: ruleGroups }));
  writeFileSync(join(dir, 'tests.yaml'), stringify({ rule_files: ['rules.yaml'], evaluation_interval: '1m', tests }));
  return run('promtool', ['test', 'rules', 'tests.yaml'], { cwd: dir });
}

/** Runs `promtool check rules` on `groups` written as a rules file: its output (throws if invalid). */
export function promtoolCheck(groups: unknown[]): string {
  const dir = mkdtempSync(join(tmpdir(), 'disagg-rules-'));
  writeFileSync(join(dir, 'rules.yaml'), stringify({ groups }));
  return run('promtool', ['check', 'rules', join(dir, 'rules.yaml')]);
}
