// Why a label selector matches no pod, from the pods the namespace does have: the commonest
// discovery mistake is a label that no pod carries (`role=prefill` where the pods say
// `role=decode`), and the labels they carry say so at a glance.

/** What the warning about a selector that matches no pod says. */
export interface UnmatchedSelector {
  /** Pods in the namespace (all namespaces when none is set), whatever their labels. */
  podsInNamespace: number;
  /** The label sets those pods carry, the commonest first (at most five), with how many carry each. */
  labelsCarried: string[];
  /** One sentence: which term of the selector no pod has, and what the pods have instead. */
  hint: string;
}

const SHOWN = 5;

/**
 * Explains why `selector` matches none of `pods` (their labels): each equality term no pod
 * carries, with the values the pods give that label instead.
 *
 * @example
 * explainUnmatched('app=vllm,role=prefill', [{ app: 'vllm', role: 'decode' }], 'llm').hint;
 * // "no pod has role=prefill (role is 'decode' on them); pods in the namespace llm carry app=vllm,role=decode (1)"
 */
export function explainUnmatched(
  selector: string,
  pods: ReadonlyArray<Readonly<Record<string, string>>>,
  namespace: string | undefined,
): UnmatchedSelector {
  const sets = new Map<string, number>();
  for (const labels of pods) {
    const key = Object.entries(labels)
      .sort(([a], [b]) => a.localeCompare(b))
      .map(([name, value]) => `${name}=${value}`)
      .join(',');
    sets.set(key || '(no labels)', (sets.get(key || '(no labels)') ?? 0) + 1);
  }
  const labelsCarried = [...sets.entries()]
    .sort((a, b) => b[1] - a[1])
    .slice(0, SHOWN)
    .map(([set, count]) => `${set} (${count})`);
  const where = namespace === undefined ? 'the cluster' : `the namespace ${namespace}`;
  if (pods.length === 0) {
    return { podsInNamespace: 0, labelsCarried, hint: `${where} has no pod at all: is it the right namespace?` };
  }
  const missing = equalityTerms(selector).flatMap(([name, value]) => {
    if (pods.some((labels) => labels[name] === value)) return [];
    const seen = [...new Set(pods.map((labels) => labels[name]).filter((given) => given !== undefined))];
    return [
      seen.length === 0
        ? `no pod has the label ${name}`
        : `no pod has ${name}=${value} (${name} is ${seen
            .slice(0, SHOWN)
            .map((given) => `'${given}'`)
            .join(' or ')} on them)`,
    ];
  });
  const said = missing.length > 0 ? missing.join('; ') : 'no pod has every label of the selector at once';
  return {
    podsInNamespace: pods.length,
    labelsCarried,
    hint: `${said}; pods in ${where} carry ${labelsCarried.slice(0, 3).join(', ')}`,
  };
}

/** The `name=value` (and `name==value`) terms of a label selector; set-based terms are skipped. */
function equalityTerms(selector: string): Array<[string, string]> {
  return selector
    .split(/,(?![^(]*\))/)
    .map((term) => /^\s*([^!=\s]+)\s*==?\s*([^=\s]*)\s*$/.exec(term))
    .filter((match): match is RegExpExecArray => match !== null)
    .map((match) => [match[1] as string, match[2] as string]);
}
