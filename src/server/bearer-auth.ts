import { createHash, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { answerJson } from '../http/node-server.js';
import type { Logger } from '../runtime/logger.js';

/**
 * Whether the request carries `key` as `Authorization: Bearer <key>`, compared in constant
 * time (as digests, so that the key's length does not show either); true without a key.
 *
 * @internal
 */
export function bearerMatches(req: IncomingMessage, key: string | undefined): boolean {
  if (key === undefined) return true;
  const given = /^Bearer\s+(.+)$/i.exec(req.headers.authorization ?? '')?.[1]?.trim() ?? '';
  const digest = (text: string) => createHash('sha256').update(text).digest();
  return timingSafeEqual(digest(given), digest(key));
}

/**
 * The 401 of a missing or wrong key, as OpenAI answers it (`invalid_api_key`); logged at warn
 * when `refused` says where (the key sent is never logged).
 *
 * @internal
 */
export function answerUnauthorized(
  res: ServerResponse,
  which: 'API key' | 'admin key',
  refused?: { req: IncomingMessage; path: string; logger: Logger },
): void {
  if (refused !== undefined) {
    // An operator must see who is knocking with a wrong or stale key (a client not yet given
    // the rotated one, a scan): where from and at what, never the key sent.
    const { req, path, logger } = refused;
    const sent = /^Bearer\s+\S/i.test(req.headers.authorization ?? '');
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
  answerJson(res, 401, {
    error: {
      message: `Incorrect or missing ${which}: send it as "Authorization: Bearer <key>"`,
      type: 'invalid_request_error',
      code: 'invalid_api_key',
      param: null,
    },
  });
}
