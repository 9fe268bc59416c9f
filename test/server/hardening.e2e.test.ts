import { request as httpRequest } from 'node:http';
import OpenAI from 'openai';
import { request } from 'undici';
import { describe, expect, it } from 'vitest';
import { proxyHarness } from '../support/proxy.js';

const { setup } = proxyHarness();

/** A POST to the proxy with a raw body; the status and the whole answer. */
async function post(url: string, path: string, body: string, headers: Record<string, string> = {}) {
  const answer = await request(`${url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body,
  });
  return { status: answer.statusCode, headers: answer.headers, text: await answer.body.text() };
}

describe('disagg serve under hostile input and faults', () => {
  for (const stream of [true, false]) {
    it(`a decode that answers nothing but [DONE] is a 502 naming decode, never an empty 200 (stream: ${stream})`, async () => {
      const { client, prefill } = await setup('vllm', { decode: { fault: { type: 'empty' } } });
      const error = await client.completions
        .create({ model: 'fake-model', prompt: 'Say', max_tokens: 3, stream })
        .then(async (answer) => {
          if (stream) for await (const _ of answer as AsyncIterable<unknown>);
          return answer;
        })
        .catch((e: unknown) => e);
      expect(error).toBeInstanceOf(OpenAI.APIError);
      expect((error as InstanceType<typeof OpenAI.APIError>).status).toBe(502);
      expect((error as Error).message).toContain('[DONE] before its answer finished');
      expect((error as { error?: { leg?: string } }).error?.leg).toBe('decode');
      expect(prefill.ledger.claimed()).toHaveLength(1);
    });
  }

  it('a streamed answer honours Connection: close: the proxy closes the socket after it', async () => {
    const { url } = await setup('vllm');
    const answer = await onOwnConnection(
      url,
      '/v1/completions',
      JSON.stringify({ model: 'fake-model', prompt: 'Say', max_tokens: 2, stream: true }),
      { 'content-type': 'application/json', connection: 'close' },
    );
    expect(answer.status).toBe(200);
    expect(answer.connection).toBe('close');
    expect(answer.text.trim().endsWith('data: [DONE]')).toBe(true);
  });
});

/** A request on a connection of its own; resolves with the status and connection header once the server closed it. */
function onOwnConnection(url: string, path: string, body: string, headers: Record<string, string>) {
  return new Promise<{ status: number | undefined; connection: string | undefined; text: string }>((resolve, reject) => {
    const req = httpRequest(`${url}${path}`, { method: 'POST', agent: false, headers }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => {
        text += chunk;
      });
      res.on('end', () => {
        // The server closing the socket is what is awaited: with keep-alive it would stay open.
        res.socket.once('close', () => resolve({ status: res.statusCode, connection: res.headers.connection, text }));
      });
    });
    req.on('error', reject);
    req.end(body);
  });
}
