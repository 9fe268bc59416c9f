// A real Prometheus for a test: scraping the given targets every second, queried over its API.
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

/** Polls `check` every 100 ms for up to 30 s: Prometheus starts, then scrapes every second. */
export async function until(check: () => Promise<boolean>, what: string): Promise<void> {
  for (let i = 0; i < 300; i++) {
    if (await check().catch(() => false)) return;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  throw new Error(`never happened: ${what}`);
}

/** What an instant query answered. */
export type QueryAnswer = {
  status: string;
  error?: string;
  data?: { result: Array<{ metric: Record<string, string> }> };
};

/** A running Prometheus: `query` an expression now, `stop` it. */
export interface LivePrometheus {
  query(expr: string): Promise<QueryAnswer>;
  stop(): void;
}

/**
 * Starts `prometheus` scraping `targets` (host:port of /metrics) as job `disagg`, every second,
 * each series given `labels` besides (as the PodMonitor's relabeling gives them `pod`).
 */
export async function startPrometheus(
  targets: readonly string[],
  labels: Record<string, string> = {},
): Promise<LivePrometheus> {
  const dir = mkdtempSync(join(tmpdir(), 'disagg-prometheus-'));
  writeFileSync(
    join(dir, 'prometheus.yml'),
    [
      'global: { scrape_interval: 1s, evaluation_interval: 1s }',
      'scrape_configs:',
      '  - job_name: disagg',
      `    static_configs: [{ targets: [${targets.map((target) => `"${target}"`).join(', ')}], labels: ${JSON.stringify(labels)} }]`,
    ].join('\n'),
  );
  const port = await freePort();
  const api = `http://127.0.0.1:${port}`;
  const child: ChildProcess = spawn(
    'prometheus',
    [
      `--config.file=${join(dir, 'prometheus.yml')}`,
      `--storage.tsdb.path=${join(dir, 'data')}`,
      `--web.listen-address=127.0.0.1:${port}`,
    ],
    { stdio: 'ignore' },
  );
  return {
    async query(expr) {
      const answer = await fetch(`${api}/api/v1/query?query=${encodeURIComponent(expr)}`);
      return (await answer.json()) as QueryAnswer;
    },
    stop: () => void child.kill('SIGTERM'),
  };
}
