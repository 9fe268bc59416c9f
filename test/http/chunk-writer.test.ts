import { once } from 'node:events';
import { createServer, type IncomingMessage, request, type Server, type ServerResponse } from 'node:http';
import { connect, type Socket } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { ChunkWriter } from '../../src/http/chunk-writer.js';

let server: Server | undefined;

afterEach(async () => {
  server?.closeAllConnections();
  await new Promise((resolve) => server?.close(resolve) ?? resolve(undefined));
  server = undefined;
});

/** A server whose every response is answered by `answer`; its port. */
async function serve(answer: (res: ServerResponse, req: IncomingMessage) => void | Promise<void>): Promise<number> {
  server = createServer((req, res) => {
    req.resume();
    void answer(res, req);
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return (server.address() as { port: number }).port;
}

/** Everything the server sends on one connection until `until` matches it: the raw bytes. */
async function raw(port: number, head: string, until: (text: string) => boolean): Promise<string> {
  const socket: Socket = connect(port, '127.0.0.1');
  await once(socket, 'connect');
  socket.write(head);
  let text = '';
  for await (const chunk of socket) {
    text += chunk.toString('utf8');
    if (until(text)) break;
  }
  socket.destroy();
  return text;
}

const GET = 'GET / HTTP/1.1\r\nhost: x\r\n\r\n';

/** The chunks of an HTTP/1.1 chunked body, each as its bytes; throws on a size that does not match. */
function decodeChunks(body: Buffer): Buffer[] {
  const chunks: Buffer[] = [];
  let at = 0;
  for (;;) {
    const line = body.indexOf('\r\n', at);
    const size = Number.parseInt(body.subarray(at, line).toString('latin1'), 16);
    if (size === 0) return chunks;
    const data = body.subarray(line + 2, line + 2 + size);
    if (body.subarray(line + 2 + size, line + 4 + size).toString('latin1') !== '\r\n') {
      throw new Error(`chunk of ${size} bytes not followed by CRLF`);
    }
    chunks.push(data);
    at = line + 4 + size;
  }
}

describe('ChunkWriter: a streamed body, one HTTP chunk per piece', () => {
  it('frames a piece as one chunk whose size is its UTF-8 byte length; the chunks hold exactly what was written', async () => {
    const second = 'data: é€😀\n\n';
    const port = await serve(async (res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      const body = new ChunkWriter(res);
      body.write('data: first\n\n');
      await new Promise((resolve) => setImmediate(resolve)); // the head and the first piece have gone
      body.write(second);
      res.end('data: [DONE]\n\n');
    });
    const text = await raw(port, GET, (got) => got.endsWith('0\r\n\r\n'));
    const chunks = decodeChunks(Buffer.from(text.slice(text.indexOf('\r\n\r\n') + 4)));
    expect(chunks.map((chunk) => chunk.toString('utf8')).join('')).toBe(`data: first\n\n${second}data: [DONE]\n\n`);
    // The piece written on its own is one chunk of its bytes (more than its characters).
    expect(chunks.map((chunk) => chunk.toString('utf8'))).toContain(second);
    expect(Buffer.byteLength(second)).not.toBe(second.length);
  });

  it('a piece written while the response still holds an earlier one (Node 22 and later, until the turn ends) never overtakes it', async () => {
    const port = await serve((res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      const body = new ChunkWriter(res);
      for (let i = 0; i < 5; i++) body.write(`data: ${i}\n\n`); // one turn: the head and all five
      res.end('data: [DONE]\n\n');
    });
    const text = await raw(port, GET, (got) => got.endsWith('0\r\n\r\n'));
    expect(text.startsWith('HTTP/1.1 200 OK\r\n')).toBe(true);
    const chunks = decodeChunks(Buffer.from(text.slice(text.indexOf('\r\n\r\n') + 4)));
    expect(Buffer.concat(chunks).toString('utf8')).toBe(
      'data: 0\n\ndata: 1\n\ndata: 2\n\ndata: 3\n\ndata: 4\n\ndata: [DONE]\n\n',
    );
  });

  it('leaves the connection reusable: a second request on it gets its whole answer', async () => {
    let served = 0;
    const port = await serve((res) => {
      served += 1;
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      const body = new ChunkWriter(res);
      for (let i = 0; i < 3; i++) body.write(`data: ${served}.${i}\n\n`);
      res.end();
    });
    const text = await raw(port, GET + GET, (got) => got.split('0\r\n\r\n').length === 3);
    const answers = text.split('HTTP/1.1 200 OK').slice(1);
    expect(answers).toHaveLength(2);
    for (const [n, answer] of answers.entries()) {
      for (let i = 0; i < 3; i++) expect(answer).toContain(`data: ${n + 1}.${i}\n\n`);
    }
  });

  it("what a client reads is what was written, through Node's own HTTP parser", async () => {
    const pieces = Array.from({ length: 50 }, (_, i) => `data: {"n":${i},"text":"ü${'x'.repeat(i)}"}\n\n`);
    const port = await serve((res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      const body = new ChunkWriter(res);
      for (const piece of pieces) body.write(piece);
      res.end();
    });
    const received = await new Promise<string>((resolve, reject) => {
      request({ port, host: '127.0.0.1' }, (answer) => {
        let text = '';
        answer.setEncoding('utf8');
        answer.on('data', (chunk: string) => {
          text += chunk;
        });
        answer.on('end', () => resolve(text));
      })
        .on('error', reject)
        .end();
    });
    expect(received).toBe(pieces.join(''));
  });

  it('each piece is one write to the socket; pieces written in one turn wait on the corked socket and leave together after it', async () => {
    let seen: { corked: number; buffered: number; after: number; writes: number } | undefined;
    const port = await serve(async (res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      const body = new ChunkWriter(res);
      body.write('data: head\n\n');
      await new Promise((resolve) => setImmediate(resolve)); // the head has gone
      const socket = res.socket as Socket;
      let writes = 0;
      const write = socket.write;
      socket.write = ((...args: Parameters<Socket['write']>) => {
        writes += 1;
        return write.apply(socket, args);
      }) as Socket['write'];
      body.write('data: 1\n\n');
      body.write('data: 2\n\n');
      body.write('data: 3\n\n');
      socket.write = write;
      const corked = socket.writableCorked;
      const buffered = socket.writableLength;
      await new Promise((resolve) => process.nextTick(resolve));
      await new Promise((resolve) => setImmediate(resolve));
      seen = { corked, buffered, after: socket.writableCorked, writes };
      res.end();
    });
    await raw(port, GET, (got) => got.endsWith('0\r\n\r\n'));
    expect(seen?.corked).toBe(1);
    expect(seen?.buffered).toBe(3 * Buffer.byteLength('9\r\ndata: 1\n\n\r\n'));
    expect(seen?.after).toBe(0);
    expect(seen?.writes).toBe(3); // one string per piece (Node's res.write hands over four)
  });

  it('an HTTP/1.0 client, which Node does not answer in chunks, gets the plain body and a closed connection', async () => {
    const port = await serve((res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      const body = new ChunkWriter(res);
      body.write('data: a\n\n');
      body.write('data: b\n\n');
      res.end('data: [DONE]\n\n');
    });
    const text = await raw(port, 'GET / HTTP/1.0\r\nhost: x\r\n\r\n', () => false);
    expect(text.slice(text.indexOf('\r\n\r\n') + 4)).toBe('data: a\n\ndata: b\n\ndata: [DONE]\n\n');
    expect(text.toLowerCase()).not.toContain('transfer-encoding');
  });

  it('reports a full socket, and drained() resolves true once the client has read it', async () => {
    const big = `data: ${'x'.repeat(256 * 1024)}\n\n`;
    let result: { full: boolean; drained: boolean } | undefined;
    const port = await serve(async (res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      const body = new ChunkWriter(res);
      body.write('data: head\n\n');
      let full = false;
      for (let i = 0; i < 64 && !full; i++) full = !body.write(big);
      const drained = full ? await body.drained() : false;
      result = { full, drained };
      res.end();
    });
    await raw(port, GET, (got) => got.endsWith('0\r\n\r\n'));
    expect(result).toEqual({ full: true, drained: true });
  });

  it('drained() resolves false when the response is closed first (a slow client given up), at once once destroyed; its listeners go', async () => {
    let client: Socket | undefined;
    const seen = new Promise<{ first: boolean; after: boolean; listenersBefore: number; listenersAfter: number }>(
      (resolve) => {
        void serve(async (res) => {
          res.writeHead(200, { 'content-type': 'text/event-stream' });
          const body = new ChunkWriter(res);
          body.write('data: head\n\n');
          const socket = res.socket as Socket;
          let full = false;
          for (let i = 0; i < 64 && !full; i++) full = !body.write(`data: ${'x'.repeat(256 * 1024)}\n\n`);
          const listenersBefore = socket.listenerCount('drain');
          const wait = body.drained();
          res.destroy();
          const first = await wait;
          resolve({
            first,
            after: await body.drained(),
            listenersBefore,
            listenersAfter: socket.listenerCount('drain'),
          });
        }).then(async (port) => {
          client = connect(port, '127.0.0.1');
          client.on('error', () => {});
          await once(client, 'connect');
          client.pause(); // never reads
          client.write(GET);
        });
      },
    );
    const result = await seen;
    expect(result.first).toBe(false);
    expect(result.after).toBe(false);
    expect(result.listenersAfter).toBe(result.listenersBefore);
  });
});
