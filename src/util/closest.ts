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

/**
 * Edit distance with a swap of two neighbours as one edit (optimal string alignment): `prot`
 * is one typo from `port`, not two. Two rows kept besides the current one.
 */
function editDistance(a: string, b: string): number {
  let before: number[] = [];
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const row = [i];
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      let best = Math.min((previous[j] as number) + 1, (row[j - 1] as number) + 1, (previous[j - 1] as number) + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) {
        best = Math.min(best, (before[j - 2] as number) + 1);
      }
      row[j] = best;
    }
    before = previous;
    previous = row;
  }
  return previous[b.length] as number;
}
