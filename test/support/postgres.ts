import { spawnSync } from 'node:child_process';
import { chownSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';

/** The password of the test servers' `postgres` role: the tests check it never reaches an error's message. */
export const POSTGRES_TEST_PASSWORD = 'sekret-pw-4711';

/**
 * Where PostgreSQL's server programs are: on PATH, else Debian's `/usr/lib/postgresql/<major>/bin`
 * (the `postgresql` package puts them there and links only the clients onto PATH), the newest
 * major first. Undefined without them.
 */
export function postgresBin(): string | undefined {
  const onPath = spawnSync('sh', ['-c', 'command -v initdb'], { encoding: 'utf8' });
  if (onPath.status === 0 && onPath.stdout.trim() !== '') return join(onPath.stdout.trim(), '..');
  const root = '/usr/lib/postgresql';
  if (!existsSync(root)) return undefined;
  const majors = readdirSync(root)
    .filter((name) => existsSync(join(root, name, 'bin', 'initdb')))
    .sort((a, b) => Number(b) - Number(a));
  return majors[0] === undefined ? undefined : join(root, majors[0], 'bin');
}

/**
 * Whether the tests that need a PostgreSQL server can run: skipped without one (it says which
 * Debian package brings it), so that `npm test` passes anywhere; with REQUIRE_TEST_TOOLS=1 (CI)
 * a missing server fails the run instead.
 */
export function postgresTool(): { present: boolean; skip: boolean; why: string } {
  const present = postgresBin() !== undefined;
  if (!present && process.env.REQUIRE_TEST_TOOLS === '1') {
    throw new Error('PostgreSQL (initdb) is not installed but REQUIRE_TEST_TOOLS=1: apt-get install postgresql');
  }
  return {
    present,
    skip: !present,
    why: present ? 'postgresql' : 'PostgreSQL not installed (apt-get install postgresql): skipped',
  };
}

/**
 * A free TCP port on loopback below Linux's ephemeral range (32768 and up): a port from that
 * range could be taken by any test's outgoing connection between this check and the server's
 * bind, which once failed a CI run's `pg_ctl start`; below it only an explicit bind competes.
 */
async function freePort(): Promise<number> {
  for (;;) {
    const port = 20000 + Math.floor(Math.random() * 12000);
    const server = createServer();
    const bound = await new Promise<boolean>((resolve) => {
      server.once('error', () => resolve(false));
      server.listen(port, '127.0.0.1', () => resolve(true));
    });
    if (!bound) continue;
    await new Promise((resolve) => server.close(resolve));
    return port;
  }
}

/**
 * `command` as the user PostgreSQL runs as: itself, unless this process is root (initdb and
 * postgres refuse root), then as `postgres` where that user exists (Debian's package makes
 * it), else `nobody`.
 */
function asServerUser(): { prefix: string[]; user: { uid: number; gid: number } | undefined } {
  if (process.getuid?.() !== 0) return { prefix: [], user: undefined };
  for (const name of ['postgres', 'nobody']) {
    const uid = spawnSync('id', ['-u', name], { encoding: 'utf8' });
    const gid = spawnSync('id', ['-g', name], { encoding: 'utf8' });
    if (uid.status === 0 && gid.status === 0) {
      return {
        prefix: ['runuser', '-u', name, '--'],
        user: { uid: Number(uid.stdout.trim()), gid: Number(gid.stdout.trim()) },
      };
    }
  }
  throw new Error('running as root and neither a postgres nor a nobody user exists to run PostgreSQL as');
}

function runChecked(argv: string[]): void {
  const [command, ...args] = argv as [string, ...string[]];
  const result = spawnSync(command, args, { encoding: 'utf8' });
  if (result.error !== undefined) throw result.error;
  if (result.status !== 0) {
    throw new Error(`${argv.join(' ')} exited ${result.status}:\n${result.stdout}\n${result.stderr}`);
  }
}

/** A PostgreSQL server of a test's own (see {@link startPostgres}). */
export interface TestPostgres {
  /** `postgres://postgres:<password>@127.0.0.1:<port>/disagg_test`. */
  readonly url: string;
  readonly port: number;
  /** A new empty database on the server, and its URL (one per test, for a store of its own). */
  database(): Promise<string>;
  /** Stops the server (fast shutdown: what was committed stays). */
  stop(): Promise<void>;
  /** Starts it again on the same port and data directory. */
  start(): Promise<void>;
  /** Stops it and removes its directory. */
  close(): Promise<void>;
}

/**
 * A real PostgreSQL server of a test's own: initdb into a temporary directory (password
 * authentication on TCP, fsync off), started on a free loopback port with its socket in that
 * directory, and a database `disagg_test` created. `stop()` and `start()` again keep the
 * data (a restart); `close()` stops it and removes the directory. Throws when PostgreSQL is
 * not installed (check {@link postgresTool} first).
 */
export async function startPostgres(): Promise<TestPostgres> {
  const bin = postgresBin();
  if (bin === undefined) throw new Error('PostgreSQL is not installed: apt-get install postgresql');
  const { prefix, user } = asServerUser();
  const dir = mkdtempSync(join(tmpdir(), 'disagg-pg-'));
  const data = join(dir, 'data');
  const passwordFile = join(dir, 'password');
  writeFileSync(passwordFile, POSTGRES_TEST_PASSWORD);
  if (user !== undefined) {
    chownSync(dir, user.uid, user.gid);
    chownSync(passwordFile, user.uid, user.gid);
  }
  const ctl = (...args: string[]) => runChecked([...prefix, join(bin, 'pg_ctl'), ...args]);
  runChecked([
    ...prefix,
    join(bin, 'initdb'),
    '-D',
    data,
    '-U',
    'postgres',
    '--pwfile',
    passwordFile,
    '--auth-host=scram-sha-256',
    '--auth-local=trust',
    '--no-sync',
    '-E',
    'UTF8',
    '--locale=C',
  ]);
  const log = join(dir, 'log');
  let port = await freePort();
  // pg_ctl only says "could not start server": the reason is in the server's log, so a failed
  // start says what the log says.
  const start = async () => {
    try {
      const options = `-p ${port} -c listen_addresses=127.0.0.1 -k ${dir} -c fsync=off -c full_page_writes=off -c synchronous_commit=off`;
      ctl('start', '-w', '-s', '-D', data, '-l', log, '-o', options);
    } catch (error) {
      const said = existsSync(log) ? readFileSync(log, 'utf8').split('\n').slice(-15).join('\n') : '(no log)';
      throw new Error(`${(error as Error).message}\nthe server's log ends:\n${said}`);
    }
  };
  const stop = async () => ctl('stop', '-w', '-s', '-D', data, '-m', 'fast');
  // Another test may bind the chosen port first: a first start that finds it taken tries another.
  for (let attempt = 1; ; attempt++) {
    try {
      await start();
      break;
    } catch (error) {
      if (attempt >= 3 || !/could not (bind|create listen)|already in use/i.test((error as Error).message)) throw error;
      port = await freePort();
    }
  }
  const base = `postgres://postgres:${POSTGRES_TEST_PASSWORD}@127.0.0.1:${port}`;
  let made = 0;
  const database = async () => {
    const name = `disagg_test_${made++}`;
    const client = new pg.Client({ connectionString: `${base}/postgres` });
    await client.connect();
    try {
      await client.query(`CREATE DATABASE ${name}`);
    } finally {
      await client.end();
    }
    return `${base}/${name}`;
  };
  const url = await database();
  return {
    url,
    port,
    database,
    stop,
    start,
    close: async () => {
      try {
        await stop();
      } catch {
        // Already stopped.
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
