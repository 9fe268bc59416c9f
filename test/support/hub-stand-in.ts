// A stand-in for the Hugging Face hub's file API, as @huggingface/hub 2.x calls it (read from
// its sources): GET /api/models/{org}/{name}/revision/{rev} (modelInfo: the commit `sha`), POST
// /api/models/{org}/{name}/paths-info/{rev} (which files exist, their oid and LFS sha256, size),
// GET /{org}/{name}/resolve/{rev}/{path} (a `Range: bytes=0-0` probe, then the file; an LFS file
// by a redirect, as the hub sends it to its CDN), with ETag, X-Repo-Commit and Content-Range.
// Gated models answer 401 without a bearer token and 403 with another one, as the hub does.
import { createHash } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/** A model the stand-in serves. */
export interface StandInModel {
  /** Its files at its one commit, path to content. */
  files: Record<string, Buffer | string>;
  /** The commit every revision (`main`, or the commit itself) resolves to. */
  commit?: string;
  /** Gated: only this bearer token gets it. */
  token?: string;
  /** A permissive mirror (or a hostile HF_ENDPOINT): every revision resolves to `commit`, `..` and all. */
  anyRevision?: boolean;
  /** The oid paths-info answers for a file, in place of its git blob id (a hostile hub's). */
  oids?: Record<string, string>;
}

/** A request the stand-in saw. */
export interface StandInRequest {
  method: string;
  path: string;
  authorization: string | undefined;
}

/** The running stand-in: its base URL (for HF_ENDPOINT), what it was asked, `close()`. */
export interface HubStandIn {
  url: string;
  requests: StandInRequest[];
  close(): Promise<void>;
}

/** The commit a stand-in model is at when none is given. */
export const STAND_IN_COMMIT = 'c0ffee0000000000000000000000000000000001';

/** Starts a stand-in serving `models` (by `org/name`) on a free loopback port. */
export async function hubStandIn(models: Record<string, StandInModel>): Promise<HubStandIn> {
  const requests: StandInRequest[] = [];
  const server = createServer((request, response) => {
    const raw = (request.url ?? '/').split('?')[0] as string;
    const path = decodeURIComponent(raw);
    requests.push({ method: request.method ?? 'GET', path, authorization: request.headers.authorization });
    let body = '';
    request.on('data', (chunk: Buffer) => {
      body += chunk.toString('utf8');
    });
    request.on('end', () => {
      answer(models, request, response, raw, body);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

// Routes are matched on the path as sent, each part then decoded, as the hub does: a revision
// is one part (`refs%2Fpr%2F1`), whatever it holds once decoded.
function answer(
  models: Record<string, StandInModel>,
  request: IncomingMessage,
  response: ServerResponse,
  raw: string,
  body: string,
): true {
  const decoded = (match: RegExpExecArray | null) =>
    match === null ? null : (match.map((part) => decodeURIComponent(part)) as RegExpExecArray);
  const cdn = decoded(/^\/cdn-lfs\/([^/]+\/[^/]+)\/(.+)$/.exec(raw));
  if (cdn !== null) {
    const content = models[cdn[1] as string]?.files[cdn[2] as string];
    if (content === undefined) return json(response, 404, { error: 'Entry not found' });
    return serveFile(request, response, Buffer.from(content), models[cdn[1] as string] as StandInModel);
  }
  const api = decoded(/^\/api\/models\/([^/]+\/[^/]+)\/(revision|paths-info)\/([^/]+)$/.exec(raw));
  const resolve = decoded(/^\/([^/]+\/[^/]+)\/resolve\/([^/]+)\/(.+)$/.exec(raw));
  const name = (api?.[1] ?? resolve?.[1]) as string | undefined;
  const model = name === undefined ? undefined : models[name];
  if (name === undefined || model === undefined) {
    response.setHeader('X-Error-Code', 'RepoNotFound');
    return json(response, 404, { error: 'Repository not found' });
  }
  if (model.token !== undefined) {
    const given = request.headers.authorization;
    if (given === undefined) {
      return json(response, 401, { error: `Access to model ${name} is restricted. You must be authenticated.` });
    }
    if (given !== `Bearer ${model.token}`) {
      return json(response, 403, {
        error: `Access to model ${name} is restricted and you are not in the authorized list.`,
      });
    }
  }
  const commit = model.commit ?? STAND_IN_COMMIT;
  const revision = (api?.[3] ?? resolve?.[2]) as string;
  if (revision !== 'main' && revision !== commit && model.anyRevision !== true) {
    response.setHeader('X-Error-Code', 'RevisionNotFound');
    return json(response, 404, { error: `Invalid rev id: ${revision}` });
  }
  if (api?.[2] === 'revision') {
    return json(response, 200, {
      _id: `id-${name}`,
      id: name,
      sha: commit,
      private: false,
      gated: model.token === undefined ? false : 'auto',
      downloads: 0,
      likes: 0,
      lastModified: '2026-01-01T00:00:00.000Z',
    });
  }
  if (api?.[2] === 'paths-info') {
    const { paths } = JSON.parse(body) as { paths: string[] };
    return json(
      response,
      200,
      paths.flatMap((file) => {
        const content = model.files[file];
        if (content === undefined) return [];
        const bytes = Buffer.from(content);
        const oid = model.oids?.[file] ?? gitOid(bytes);
        return [{ type: 'file', path: file, size: bytes.length, oid, ...lfsOf(file, bytes) }];
      }),
    );
  }
  const file = resolve?.[3] as string;
  const content = model.files[file];
  if (content === undefined) {
    response.setHeader('X-Error-Code', 'EntryNotFound');
    return json(response, 404, { error: 'Entry not found' });
  }
  response.setHeader('X-Repo-Commit', commit);
  if (lfsOf(file, Buffer.from(content)).lfs !== undefined) {
    // The hub sends an LFS file's bytes from its CDN.
    response.writeHead(302, { Location: `/cdn-lfs/${name}/${file}` }).end();
    return true;
  }
  return serveFile(request, response, Buffer.from(content), model);
}

/** The file, or the range asked for (`bytes=a-b`) as a 206 with Content-Range. */
function serveFile(request: IncomingMessage, response: ServerResponse, bytes: Buffer, model: StandInModel): true {
  response.setHeader('ETag', `"${gitOid(bytes)}"`);
  response.setHeader('X-Repo-Commit', model.commit ?? STAND_IN_COMMIT);
  response.setHeader('Accept-Ranges', 'bytes');
  const range = /^bytes=(\d+)-(\d*)$/.exec(request.headers.range ?? '');
  if (range === null) {
    response.writeHead(200, { 'Content-Type': 'application/octet-stream', 'Content-Length': bytes.length });
    response.end(bytes);
    return true;
  }
  const start = Number(range[1]);
  const end = range[2] === '' ? bytes.length - 1 : Math.min(Number(range[2]), bytes.length - 1);
  const part = bytes.subarray(start, end + 1);
  response.writeHead(206, {
    'Content-Type': 'application/octet-stream',
    'Content-Length': part.length,
    'Content-Range': `bytes ${start}-${end}/${bytes.length}`,
  });
  response.end(part);
  return true;
}

/** Files over 1 MB are LFS files here (the hub's rule is by extension and size; the effect is the same). */
function lfsOf(file: string, bytes: Buffer): { lfs?: { oid: string; size: number; pointerSize: number } } {
  if (bytes.length < 1_000_000 || !file.endsWith('.json')) return {};
  return { lfs: { oid: createHash('sha256').update(bytes).digest('hex'), size: bytes.length, pointerSize: 134 } };
}

/** git's blob id. */
function gitOid(bytes: Buffer): string {
  return createHash('sha1').update(`blob ${bytes.length}\0`).update(bytes).digest('hex');
}

/** Answers with a JSON body; true, so that a route can `return json(...)`. */
function json(response: ServerResponse, status: number, value: unknown): true {
  response.writeHead(status, { 'Content-Type': 'application/json' });
  response.end(JSON.stringify(value));
  return true;
}
