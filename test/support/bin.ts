import { type ChildProcess, spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('../..', import.meta.url));

/** A running `disagg serve` of the built bin (dist/cli.js, the image's entry point). */
export interface ServedBin {
  /** The proxy's URL, from its "disagg serve listening" line. */
  url: string;
  /** That line, parsed (traces, metrics, workers). */
  listening: Record<string, unknown>;
  /** Its stdout and stderr so far. */
  output: { out: string; err: string };
  /** SIGTERM, then its exit code. */
  stop(): Promise<number | null>;
  /** SIGKILL: gone at once, without a word to anyone. */
  kill(): void;
}

/**
 * Starts `disagg serve` from the built bin with `args` (on 127.0.0.1, any port, no drain
 * delay), `nodeArgs` before the script and `env` added to the environment; resolves once it listens. `cleanups` gets its
 * stop, for a test's afterEach.
 *
 * @throws when it exits or logs an error before it listens.
 */
export async function serveBin(
  args: string[],
  options: {
    env?: Record<string, string>;
    /** Node's own flags, before the script (the image's entry point passes some). */
    nodeArgs?: string[];
    cleanups: Array<() => Promise<unknown> | unknown>;
    /** The command: `serve` by default, or `sidecar` (the same proxy, its prefill named by a header). */
    command?: 'serve' | 'sidecar';
  },
): Promise<ServedBin> {
  const command = options.command ?? 'serve';
  const child = spawn(
    process.execPath,
    [
      ...(options.nodeArgs ?? []),
      `${root}/dist/cli.js`,
      command,
      '--port',
      '0',
      '--host',
      '127.0.0.1',
      '--drain-delay-ms',
      '0',
      ...args,
    ],
    { env: { ...process.env, ...options.env }, stdio: ['ignore', 'pipe', 'pipe'] },
  );
  const output = { out: '', err: '' };
  const exited = new Promise<number | null>((resolve) => child.on('exit', resolve));
  const stop = async () => {
    child.kill('SIGTERM');
    return exited;
  };
  options.cleanups.push(stop);
  const listening = await new Promise<Record<string, unknown>>((resolve, reject) => {
    const look = () => {
      const line = output.out.split('\n').find((entry) => entry.includes(`disagg ${command} listening`));
      if (line !== undefined) resolve(JSON.parse(line));
      else if (output.out.includes('"level":50'))
        reject(new Error(`the proxy failed to start: ${output.out}${output.err}`));
    };
    child.stdout.on('data', (chunk: Buffer) => {
      output.out += chunk.toString();
      look();
    });
    child.stderr.on('data', (chunk: Buffer) => {
      output.err += chunk.toString();
    });
    exited.then((code) => reject(new Error(`the proxy exited ${code} before listening: ${output.out}${output.err}`)));
  });
  return { url: listening.url as string, listening, output, stop, kill: () => child.kill('SIGKILL') };
}

/**
 * Starts the built bin with `args` and resolves once `ready` finds what it waits for in the
 * stdout so far (what it returns); rejects, with what the process said, when it exits first or
 * after `timeoutMs` (10 s). `children` gets the process, for a test's cleanup.
 */
export function binUntil<T>(
  args: string[],
  ready: (out: string) => T | undefined,
  options: { children: ChildProcess[]; env?: Record<string, string>; timeoutMs?: number },
): Promise<{ child: ChildProcess; found: T }> {
  const child = spawn(process.execPath, [`${root}/dist/cli.js`, ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, ...options.env },
  });
  options.children.push(child);
  let out = '';
  let err = '';
  child.stderr?.on('data', (chunk: Buffer) => {
    err += chunk.toString();
  });
  return new Promise((resolve, reject) => {
    const timer = setTimeout(
      () => reject(new Error(`${args.join(' ')}: not ready: ${out}${err}`)),
      options.timeoutMs ?? 10_000,
    );
    child.on('exit', (code) => reject(new Error(`${args.join(' ')} exited ${code}: ${out}${err}`)));
    child.stdout?.on('data', (chunk: Buffer) => {
      out += chunk.toString();
      const found = ready(out);
      if (found !== undefined) {
        clearTimeout(timer);
        resolve({ child, found });
      }
    });
  });
}
