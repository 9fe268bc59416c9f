import { type ChildProcess, spawn } from 'node:child_process';
import { createServer } from 'node:net';

/** A free TCP port on loopback (listened on for a moment, then let go). */
async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/**
 * A real `redis-server` of a test's own, on loopback, without persistence: `url` to give the
 * proxy, `stop()` and `start()` again on the same port (a Redis that goes away and comes
 * back), `close()` for the afterEach.
 */
export async function startRedis() {
  const port = await freePort();
  let child: ChildProcess | undefined;
  const start = async () => {
    const process_ = spawn(
      'redis-server',
      ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'],
      {
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    child = process_;
    await new Promise<void>((resolve, reject) => {
      let out = '';
      process_.stdout?.on('data', (chunk: Buffer) => {
        out += chunk.toString();
        if (out.includes('Ready to accept connections')) resolve();
      });
      process_.on('exit', (code) => reject(new Error(`redis-server exited ${code}: ${out}`)));
    });
  };
  const stop = async () => {
    const running = child;
    child = undefined;
    if (running === undefined || running.exitCode !== null) return;
    const exited = new Promise((resolve) => running.once('exit', resolve));
    running.kill('SIGKILL');
    await exited;
  };
  await start();
  return { url: `redis://127.0.0.1:${port}`, start, stop, close: stop };
}
