import { REQUEST_HANDOFF_FIELDS } from '../protocol/engines/handoff-wire.js';
import { branded, DisaggError } from '../util/disagg-error.js';
import type { RequestBody } from './request-shaping.js';

/**
 * The request fields that only the router may set: they steer the KV handoff between the
 * workers. From a client they are a security hole (a reused `transfer_id` reads another
 * request's KV; a client-chosen `remote_host` inside `kv_transfer_params` makes the decode
 * worker connect where the client says) or a way to collide rooms.
 */
export const HANDOFF_FIELDS: readonly string[] = REQUEST_HANDOFF_FIELDS;

/** A client request carried fields that only the router may set (see {@link HANDOFF_FIELDS}). */
export class HandoffFieldError extends DisaggError {
  static override readonly is = branded<HandoffFieldError>('HandoffFieldError');
  declare readonly code: 'DISAGG_HANDOFF_FIELD';
  readonly kind = 'client_handoff_fields' as const;
  /** The offending fields, in the order of {@link HANDOFF_FIELDS}. */
  readonly fields: readonly string[];

  constructor(fields: readonly string[]) {
    super(
      'DISAGG_HANDOFF_FIELD',
      `The request sets ${fields.map((f) => `"${f}"`).join(', ')}, which only the router may set (handoff fields); remove ${fields.length === 1 ? 'it' : 'them'}`,
    );
    this.fields = fields;
  }
}

/** Options of {@link sanitizeClientRequest}. */
export interface SanitizeOptions {
  /** `'strip'` (default) removes client-supplied handoff fields; `'reject'` throws instead. */
  clientHandoffFields?: 'strip' | 'reject' | undefined;
  /** The fields to treat as the router's own; defaults to {@link HANDOFF_FIELDS}. */
  fields?: readonly string[] | undefined;
}

/**
 * The client's request without the fields only the router may set. Returns a copy when it
 * removes anything, the same object otherwise.
 *
 * @throws {HandoffFieldError} with `clientHandoffFields: 'reject'`, naming every such field.
 * @example
 * sanitizeClientRequest({ prompt: 'Hi', kv_transfer_params: { remote_host: '10.0.0.9' } });
 * // { prompt: 'Hi' }
 */
export function sanitizeClientRequest(request: RequestBody, options: SanitizeOptions = {}): RequestBody {
  const mode = options.clientHandoffFields ?? 'strip';
  if (mode !== 'strip' && mode !== 'reject') {
    throw new TypeError(`clientHandoffFields must be "strip" or "reject", got ${JSON.stringify(mode)}`);
  }
  const present = (options.fields ?? HANDOFF_FIELDS).filter((field) => Object.hasOwn(request, field));
  if (present.length === 0) return request;
  if (mode === 'reject') throw new HandoffFieldError(present);
  const copy: RequestBody = { ...request };
  for (const field of present) delete copy[field];
  return copy;
}
