// Servers of the benchmark's own for the agents' state stores: a redis-server and a
// PostgreSQL cluster on free loopback ports, started for one run and stopped with it. Each
// start returns undefined, with the reason, where the server's programs are missing, so that a
// run on a machine without them measures the other stores and says which it skipped. Their
// stops are synchronous, so that a run that fails, or is told to stop, still stops them.
import { spawn, spawnSync } from 'node:child_process';
import { chownSync, existsSync, mkdtempSync, readdirSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';

/** A free TCP port on loopback (listened on for a moment, then let go). */
async function freePort() {
  const server = createServer();
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address();
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/**
 * A redis-server without persistence (as a cache of chains would run): `{ url, port, stop }`, or
 * `{ missing }` without redis-server on PATH.
 */
export async function startRedis() {
  if (spawnSync('redis-server', ['--version']).status !== 0) return { missing: 'redis-server is not installed' };
  const port = await freePort();
  const proc = spawn(
    'redis-server',
    ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'],
    {
      stdio: ['ignore', 'pipe', 'ignore'],
    },
  );
  await new Promise((resolve, reject) => {
    let out = '';
    proc.stdout.on('data', (chunk) => {
      out += chunk;
      if (out.includes('Ready to accept connections')) resolve();
    });
    proc.on('exit', (code) => reject(new Error(`redis-server exited ${code}: ${out}`)));
  });
  proc.stdout.resume();
  return { url: `redis://127.0.0.1:${port}`, port, stop: () => proc.kill('SIGKILL') };
}

/**
 * Where PostgreSQL's server programs are: on PATH, else Debian's `/usr/lib/postgresql/<major>/bin`
 * (the package links only the clients onto PATH), the newest major first.
 */
function postgresBin() {
  const onPath = spawnSync('sh', ['-c', 'command -v initdb'], { encoding: 'utf8' });
  // Through its links: /usr/local/bin may hold initdb and pg_ctl but not createdb.
  if (onPath.status === 0 && onPath.stdout.trim() !== '') return dirname(realpathSync(onPath.stdout.trim()));
  const root = '/usr/lib/postgresql';
  if (!existsSync(root)) return undefined;
  const majors = readdirSync(root)
    .filter((name) => existsSync(join(root, name, 'bin', 'initdb')))
    .sort((a, b) => Number(b) - Number(a));
  return majors[0] === undefined ? undefined : join(root, majors[0], 'bin');
}

/** The prefix that runs a command as `postgres` when this process is root (initdb and postgres refuse root). */
function serverUser() {
  if (process.getuid?.() !== 0) return { prefix: [], user: undefined };
  for (const name of ['postgres', 'nobody']) {
    const uid = spawnSync('id', ['-u', name], { encoding: 'utf8' });
    const gid = spawnSync('id', ['-g', name], { encoding: 'utf8' });
    if (uid.status === 0 && gid.status === 0) {
      return { prefix: ['runuser', '-u', name, '--'], user: { uid: Number(uid.stdout), gid: Number(gid.stdout) } };
    }
  }
  throw new Error('running as root and neither a postgres nor a nobody user exists to run PostgreSQL as');
}

function checked([command, ...args]) {
  const result = spawnSync(command, args, { encoding: 'utf8' });
  if (result.error !== undefined) throw result.error;
  if (result.status !== 0) throw new Error(`${command} ${args.join(' ')} exited ${result.status}: ${result.stderr}`);
  return result.stdout;
}

/**
 * A PostgreSQL cluster in a temporary directory, with the server's durable defaults (fsync and
 * synchronous_commit on: a stored response is on disk when its answer ends, as a durable store
 * promises), password authentication on loopback TCP: `{ url, port, dir, version, stop }` (stop: a fast
 * shutdown, then the directory removed), or `{ missing }` without PostgreSQL's server programs.
 */
export async function startPostgres() {
  const bin = postgresBin();
  if (bin === undefined) return { missing: 'PostgreSQL is not installed (apt-get install postgresql)' };
  const { prefix, user } = serverUser();
  const dir = mkdtempSync(join(tmpdir(), 'disagg-bench-pg-'));
  const data = join(dir, 'data');
  const password = `bench-${process.pid}`;
  writeFileSync(join(dir, 'password'), password);
  if (user !== undefined) {
    chownSync(dir, user.uid, user.gid);
    chownSync(join(dir, 'password'), user.uid, user.gid);
  }
  const port = await freePort();
  let started = false;
  const stop = () => {
    if (started) {
      started = false;
      const [command, ...args] = [...prefix, join(bin, 'pg_ctl'), 'stop', '-w', '-s', '-D', data, '-m', 'fast'];
      spawnSync(command, args);
    }
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    checked([
      ...prefix,
      join(bin, 'initdb'),
      ...['-D', data, '-U', 'postgres', '--pwfile', join(dir, 'password'), '--auth-host=scram-sha-256'],
      ...['--auth-local=trust', '--no-sync', '-E', 'UTF8', '--locale=C'],
    ]);
    const options = `-p ${port} -c listen_addresses=127.0.0.1 -k ${dir}`;
    checked([...prefix, join(bin, 'pg_ctl'), 'start', '-w', '-s', '-D', data, '-l', join(dir, 'log'), '-o', options]);
    started = true;
    checked([...prefix, join(bin, 'createdb'), '-h', dir, '-p', String(port), '-U', 'postgres', 'disagg_bench']);
    const version = checked([join(bin, 'postgres'), '--version'])
      .trim()
      .replace(/^postgres \(PostgreSQL\) /, '');
    return { url: `postgres://postgres:${password}@127.0.0.1:${port}/disagg_bench`, port, dir, version, stop };
  } catch (error) {
    stop();
    throw error;
  }
}
