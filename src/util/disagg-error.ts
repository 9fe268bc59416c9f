/**
 * Where an error keeps the brands of its class and of the classes above it. Registered with
 * `Symbol.for`, so the ESM and CommonJS copies of the library (or two versions of it) agree on
 * it; non-enumerable, so it never reaches JSON or a test's `toMatchObject`.
 */
const BRANDS = Symbol.for('disagg.error.brands');

/** A brand check: true for an instance of the class (or a subclass) from any copy of the library. */
export interface BrandCheck<T> {
  (value: unknown): value is T;
  /** The class's brand, which is also its `name`. */
  readonly brand: string;
}

/**
 * The brand check of an error class, to declare it in one line:
 * `static override readonly is = branded<NameError>('NameError')`. It works detached too
 * (`errors.filter(NameError.is)`).
 */
export function branded<T>(brand: string): BrandCheck<T> {
  const check = (value: unknown): value is T => {
    if (typeof value !== 'object' || value === null) return false;
    const brands = (value as { [BRANDS]?: unknown })[BRANDS];
    return Array.isArray(brands) && brands.includes(brand);
  };
  return Object.assign(check, { brand });
}

/**
 * The base of every error the library throws: a stable `code` (`DISAGG_...`) for programs, the
 * class's name, the `cause` kept, and a brand that `is()` checks, so that an error from one
 * copy of the library is recognised by another (`instanceof` is not: each copy has its own
 * classes).
 *
 * A subclass declares its brand in one line, which also gives it its `name`:
 *
 * @example
 * class LateError extends DisaggError {
 *   static override readonly is = branded<LateError>('LateError');
 *   constructor() { super('DISAGG_LATE', 'Too late'); }
 * }
 * LateError.is(error); // true for a LateError from any copy of the library
 */
export class DisaggError extends Error {
  /** True for any error of the library, from any copy of it. */
  static readonly is: BrandCheck<DisaggError> = branded<DisaggError>('DisaggError');
  /** A stable code for programs (`DISAGG_...`, the library's listed in `ErrorCode`); messages may change, codes do not. */
  readonly code: string;

  constructor(code: string, message: string, options?: { cause?: unknown }) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    const brands = brandsOf(new.target);
    this.name = brands[0] as string;
    this.code = code;
    Object.defineProperty(this, BRANDS, { value: brands, enumerable: false });
  }
}

/** The brands of a class and of every class above it that declares one, its own first. */
function brandsOf(type: unknown): readonly string[] {
  const brands: string[] = [];
  for (let at = type; typeof at === 'function'; at = Object.getPrototypeOf(at)) {
    if (Object.hasOwn(at, 'is')) brands.push((at as unknown as { is: BrandCheck<unknown> }).is.brand);
  }
  return Object.freeze(brands);
}
