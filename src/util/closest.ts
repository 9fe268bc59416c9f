/**
 * The known name closest to `name`, for a "did you mean" hint: compared without case and
 * without `-`, `_` and `.` (so `bootstrap_port` finds `bootstrapPort`), by edit distance, and
 * only when close enough to be a likely typo (at most a third of the name's length).
 */
export function closest(name: string, known: readonly string[]): string | undefined {
  const target = normalise(name);
  let best: string | undefined;
  let bestDistance = Number.POSITIVE_INFINITY;
  for (const candidate of known) {
    const distance = editDistance(target, normalise(candidate));
    if (distance < bestDistance) {
      best = candidate;
      bestDistance = distance;
    }
  }
  return bestDistance <= Math.max(1, Math.floor(target.length / 3)) ? best : undefined;
}

function normalise(name: string): string {
  return name.toLowerCase().replace(/[-_.]/g, '');
}

/** Levenshtein distance, one row at a time. */
function editDistance(a: string, b: string): number {
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const row = [i];
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      row[j] = Math.min((previous[j] as number) + 1, (row[j - 1] as number) + 1, (previous[j - 1] as number) + cost);
    }
    previous = row;
  }
  return previous[b.length] as number;
}
