import { request } from 'undici';
import { afterEach, expect } from 'vitest';
import { type FakeWorker, type FakeWorkerOptions, startFakeWorker } from '../../src/testing/index.js';

/**
 * Fake workers for one test file: started by `start`, closed after each test, and checked
 * then: no KV left held or stranded on any of them, unless the test said it expects some
 * (`leaveKv`, for failures no router can clean up, such as a decode worker behind a proxy
 * that refuses the request before vLLM sees it), and no decode answer computed on blocks
 * already freed, unless the test shows one (`expectStaleReads`).
 */
export function fakeWorkers() {
  let workers: FakeWorker[] = [];
  const leftBehind = new Set<FakeWorker>();
  const staleExpected = new Set<FakeWorker>();
  afterEach(async () => {
    try {
      for (const worker of workers) {
        if (!staleExpected.has(worker)) {
          expect(worker.ledger.staleReads(), `KV read after it was freed, on the ${worker.role} worker`).toEqual([]);
        }
        if (leftBehind.has(worker)) continue;
        expect(worker.ledger.outstanding(), `KV left held on the ${worker.role} worker`).toEqual([]);
        expect(worker.ledger.stranded(), `KV stranded on the ${worker.role} worker`).toEqual([]);
      }
    } finally {
      await Promise.all(workers.map((worker) => worker.close()));
      workers = [];
      leftBehind.clear();
      staleExpected.clear();
    }
  });
  return {
    async start(options: FakeWorkerOptions): Promise<FakeWorker> {
      const worker = await startFakeWorker(options);
      workers.push(worker);
      return worker;
    },
    leaveKv(worker: FakeWorker): void {
      leftBehind.add(worker);
    },
    expectStaleReads(worker: FakeWorker): void {
      staleExpected.add(worker);
    },
  };
}

/** Resolves once `check()` holds, polling on the event loop (for effects on the far side of a socket). */
export async function eventually(check: () => boolean, what: string, tries = 500): Promise<void> {
  for (let i = 0; i < tries; i++) {
    if (check()) return;
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  throw new Error(`never happened: ${what}`);
}

/** {@link eventually} for a check that has to ask over the network (a metric, a status). */
export async function eventuallyAsync(check: () => Promise<boolean>, what: string, tries = 500): Promise<void> {
  for (let i = 0; i < tries; i++) {
    if (await check()) return;
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  throw new Error(`never happened: ${what}`);
}

/** A POST of a raw body (JSON by its content type) to `url` + `path`: the status, the headers and the whole answer. */
export async function postRaw(url: string, path: string, body: string, headers: Record<string, string> = {}) {
  const answer = await request(`${url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body,
  });
  return { status: answer.statusCode, headers: answer.headers, text: await answer.body.text() };
}

/**
 * A two-token completion through a proxy in front of vLLM fakes (built bin, tarball, pods
 * found by label): a 200 of the fakes' tokens, served disaggregated.
 */
export async function expectServedCompletion(url: string): Promise<void> {
  const answer = await fetch(`${url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'm', prompt: 'x', max_tokens: 2 }),
  });
  expect(answer.status).toBe(200);
  expect(answer.headers.get('x-disagg-strategy')).toBe('disaggregated-sequential');
  expect(((await answer.json()) as { choices: Array<{ text: string }> }).choices[0]?.text).toBe('tok0 tok1 ');
}
