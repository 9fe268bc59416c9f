import { branded, DisaggError } from '../../util/disagg-error.js';

/**
 * A request about a stored object that cannot be served as asked: an unknown or another
 * owner's `previous_response_id` (400 `previous_response_not_found`, as OpenAI answers), a
 * `conversation` that is not the caller's (404), fields that cannot go together (400). `param`
 * names the field, `apiCode` is the API's own code.
 *
 * @internal
 */
export class StoredObjectError extends DisaggError {
  static override readonly is = branded<StoredObjectError>('StoredObjectError');
  declare readonly code: 'DISAGG_UNSUPPORTED_REQUEST' | 'DISAGG_NOT_FOUND';

  constructor(
    status: 400 | 404,
    readonly param: string,
    message: string,
    readonly apiCode?: string | undefined,
  ) {
    super(status === 404 ? 'DISAGG_NOT_FOUND' : 'DISAGG_UNSUPPORTED_REQUEST', message);
  }
}

/** An id as an answer repeats it: a path's id may be as long as a request line. */
export function shortId(id: string): string {
  return id.length > 80 ? `${id.slice(0, 77)}...` : id;
}
