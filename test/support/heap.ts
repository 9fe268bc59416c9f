/** Two full garbage collections (the heap tests run with --expose-gc, set in vitest.config.ts). */
export function collectGarbage(): void {
  const gc = (globalThis as { gc?: () => void }).gc;
  if (gc === undefined) throw new Error('run the memory tests with --expose-gc (vitest.config.ts sets it)');
  gc();
  gc();
}
