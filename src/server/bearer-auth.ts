import { createHash, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Endpoint } from '../endpoints/endpoint.js';
import { answerJson } from '../http/node-server.js';
import type { Logger } from '../runtime/logger.js';
import { clientKey } from '../tenancy/tenants.js';
import { apiErrorBody } from './pipeline/api-errors.js';

/**
 * Whether the request carries `key` as `Authorization: Bearer <key>` (or Anthropic's
 * `x-api-key: <key>`), compared in constant time (as digests, so that the key's length does
 * not show either); true without a key.
 *
 * @internal
 */
export function bearerMatches(req: IncomingMessage, key: string | undefined): boolean {
  if (key === undefined) return true;
  const given = clientKey(req.headers) ?? '';
  const digest = (text: string) => createHash('sha256').update(text).digest();
  return timingSafeEqual(digest(given), digest(key));
}

/**
 * The 401 of a missing or wrong key, as OpenAI answers it (`invalid_api_key`; in Anthropic's
 * shape, `authentication_error`, on its routes: `endpoint`); logged at warn when `refused`
 * says where (the key sent is never logged).
 *
 * @internal
 */
export function answerUnauthorized(
  res: ServerResponse,
  which: 'API key' | 'admin key',
  refused?: { req: IncomingMessage; path: string; logger: Logger },
  endpoint: Pick<Endpoint, 'errorShape'> = {},
): void {
  if (refused !== undefined) {
    // An operator must see who is knocking with a wrong or stale key (a client not yet given
    // the rotated one, a scan): where from and at what, never the key sent.
    const { req, path, logger } = refused;
    const sent = clientKey(req.headers) !== undefined;
    logger.warn(
      {
        method: req.method,
        path,
        client: req.socket?.remoteAddress,
        forwardedFor: req.headers['x-forwarded-for'],
        userAgent: req.headers['user-agent'],
        auth: sent ? 'wrong' : 'missing',
      },
      `Refused a request ${sent ? 'with a wrong' : 'without an'} ${which}`,
    );
  }
  const body = {
    error: {
      message: `Incorrect or missing ${which}: send it as "Authorization: Bearer <key>" (or "x-api-key: <key>")`,
      type: 'invalid_request_error',
      code: 'invalid_api_key' as string | number | null,
      param: null,
    },
  };
  answerJson(res, 401, apiErrorBody(endpoint, { status: 401, body }));
}

/**
 * The client's key as the workers read it, to pass on when no worker key replaces it: its own
 * `Authorization`, or its Anthropic `x-api-key` as a bearer (vLLM and SGLang read only that).
 *
 * @internal
 */
export function clientAuthorization(headers: IncomingMessage['headers']): string | undefined {
  if (headers.authorization !== undefined) return headers.authorization;
  const key = clientKey(headers);
  return key === undefined ? undefined : `Bearer ${key}`;
}
