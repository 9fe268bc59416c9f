/** An async iterable of exactly one item (the whole answer of a request that needs no more). */
export async function* once<T>(item: T): AsyncGenerator<T> {
  yield item;
}
