import type { IncomingMessage, ServerResponse } from 'node:http';
import { describe, expect, it } from 'vitest';
import { answerUnauthorized, bearerMatches } from '../../src/server/bearer-auth.js';

const asking = (authorization?: string) =>
  ({ headers: authorization === undefined ? {} : { authorization } }) as IncomingMessage;

describe('bearerMatches', () => {
  it('without a key every request passes', () => {
    expect(bearerMatches(asking(), undefined)).toBe(true);
    expect(bearerMatches(asking('Bearer anything'), undefined)).toBe(true);
  });

  it('with a key only "Bearer <key>" passes in Authorization: any case of Bearer, any spacing, nothing else', () => {
    for (const header of ['Bearer s3cret', 'bearer s3cret', 'BEARER   s3cret', 'Bearer s3cret  ', 'Bearer\ts3cret']) {
      expect(bearerMatches(asking(header), 's3cret'), header).toBe(true);
    }
    for (const header of [
      undefined,
      '',
      's3cret',
      'Basic s3cret',
      'Bearer s3cre',
      'Bearer s3cret2',
      'Bearer ',
      'xBearer s3cret',
    ]) {
      expect(bearerMatches(asking(header), 's3cret'), String(header)).toBe(false);
    }
  });

  it("Anthropic's x-api-key passes as a bearer does, where no Authorization says otherwise", () => {
    const withKey = (headers: Record<string, string>) => ({ headers }) as unknown as IncomingMessage;
    expect(bearerMatches(withKey({ 'x-api-key': 's3cret' }), 's3cret')).toBe(true);
    expect(bearerMatches(withKey({ 'x-api-key': 'wrong' }), 's3cret')).toBe(false);
    expect(bearerMatches(withKey({ 'x-api-key': '' }), 's3cret')).toBe(false);
    // A bearer, when sent, is the key: a right x-api-key does not make up for a wrong bearer.
    expect(bearerMatches(withKey({ authorization: 'Bearer wrong', 'x-api-key': 's3cret' }), 's3cret')).toBe(false);
  });
});

/** A response that keeps what is written to it. */
function recording() {
  const seen = { status: 0, body: '' };
  const res = {
    statusCode: 200,
    setHeader: () => undefined,
    writeHead(code: number) {
      seen.status = code;
      return this;
    },
    end(text?: string) {
      seen.body = text ?? '';
      return this;
    },
    headersSent: false,
    writableEnded: false,
    destroyed: false,
  } as unknown as ServerResponse;
  return { res, seen };
}

describe('answerUnauthorized', () => {
  it('a refusal is logged at warn with where it came from and whether a key was sent, never the key', () => {
    const cases: [string | undefined, 'wrong' | 'missing'][] = [
      ['Bearer not-the-key', 'wrong'],
      ['bearer\tnot-the-key', 'wrong'],
      ['Bearer  two-spaces', 'wrong'],
      [undefined, 'missing'],
      ['Bearer ', 'missing'],
      ['xBearer not-the-key', 'missing'],
      ['Basic not-the-key', 'missing'],
    ];
    for (const [authorization, auth] of cases) {
      const warned: [Record<string, unknown>, string][] = [];
      const logger = { warn: (fields: Record<string, unknown>, message: string) => warned.push([fields, message]) };
      const req = {
        method: 'POST',
        headers: {
          ...(authorization === undefined ? {} : { authorization }),
          'x-forwarded-for': '203.0.113.7',
          'user-agent': 'curl/8',
        },
        socket: { remoteAddress: '10.0.0.9' },
      } as unknown as IncomingMessage;
      const { res, seen } = recording();
      answerUnauthorized(res, 'admin key', { req, path: '/admin/workers', logger: logger as never });
      expect(seen.status, String(authorization)).toBe(401);
      expect(warned, String(authorization)).toEqual([
        [
          {
            method: 'POST',
            path: '/admin/workers',
            client: '10.0.0.9',
            forwardedFor: '203.0.113.7',
            userAgent: 'curl/8',
            auth,
          },
          `Refused a request ${auth === 'wrong' ? 'with a wrong' : 'without an'} admin key`,
        ],
      ]);
      expect(JSON.stringify(warned)).not.toContain('not-the-key');
    }
  });

  it('a 401 as OpenAI answers a bad key, naming which key', () => {
    for (const which of ['API key', 'admin key'] as const) {
      let status = 0;
      let body = '';
      const headers: Record<string, unknown> = {};
      const res = {
        statusCode: 200,
        setHeader: (name: string, value: unknown) => {
          headers[name.toLowerCase()] = value;
        },
        writeHead(code: number, head?: Record<string, unknown>) {
          status = code;
          for (const [name, value] of Object.entries(head ?? {})) headers[name.toLowerCase()] = value;
          return this;
        },
        end(text?: string) {
          body = text ?? '';
          return this;
        },
        headersSent: false,
        writableEnded: false,
        destroyed: false,
      } as unknown as ServerResponse;
      answerUnauthorized(res, which);
      expect(status || (res as { statusCode: number }).statusCode).toBe(401);
      expect(JSON.parse(body)).toEqual({
        error: {
          message: `Incorrect or missing ${which}: send it as "Authorization: Bearer <key>" (or "x-api-key: <key>")`,
          type: 'invalid_request_error',
          code: 'invalid_api_key',
          param: null,
        },
      });
    }
  });
});
