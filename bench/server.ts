// The Postgres server every system shares (embedded unless DATABASE_URL names
// one), a fresh database per system and repetition, plain `pg` connections
// for set-up and verification, and the development WebSocket proxy the
// project's Neon driver talks through.
//
// The proxy runs as its own process, not inside the bench: in production it
// is Neon's edge, not the Worker, so its framing cost is kept off the event
// loop that runs the sweeps and consumers (it still shares the 2 cores).
import { spawn, type ChildProcess } from 'node:child_process';
import { chmod, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { startEmbeddedPostgres, type RunningPostgres } from '../scripts/postgres.ts';

export const root = fileURLToPath(new URL('..', import.meta.url));

export interface Server {
  /** URL of the maintenance database. */
  url: string;
  embedded: boolean;
  version: string;
  /** A URL to `database` on the same server. */
  urlFor(database: string): string;
  /**
   * Creates a new database named `name` plus a serial suffix (a repetition
   * never reuses a database a previous one's pools may still hold); returns its URL.
   */
  freshDatabase(name: string): Promise<string>;
  dropDatabase(name: string): Promise<void>;
  /** Drops every database created so far (between phases, once their pools are closed). */
  dropCreated(): Promise<void>;
  stop(): Promise<void>;
}

/** The database a URL names. */
export const databaseOf = (url: string) => decodeURIComponent(new URL(url).pathname.slice(1));

/**
 * Dropping a database terminates whatever connections a peer library's pool
 * still keeps idle in it (57P01); such a pool emits the error after the
 * system was stopped. Those are expected here and nowhere else.
 */
export function ignoreTerminatedConnections(): void {
  process.on('uncaughtException', (error: Error & { code?: string }) => {
    if (error?.code === '57P01') return;
    throw error;
  });
}

export function databaseUrl(serverUrl: string, database: string): string {
  const u = new URL(serverUrl);
  u.pathname = `/${database}`;
  return u.toString();
}

/** One short-lived client: runs `fn`, then disconnects. */
export async function withClient<T>(url: string, fn: (c: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end();
  }
}

export async function startServer(databaseUrlEnv: string | undefined): Promise<Server> {
  let pgServer: RunningPostgres | undefined;
  let dataDir: string | undefined;
  let url = databaseUrlEnv;
  if (!url) {
    dataDir = await mkdtemp(join(tmpdir(), 'scheduler-bench-pg-'));
    // As root, Postgres runs as the `postgres` user: it must reach its directory.
    await chmod(dataDir, 0o755);
    pgServer = await startEmbeddedPostgres({ dir: join(dataDir, 'data'), persistent: false });
    url = pgServer.url;
  }
  const serverUrl = url;
  const admin = new pg.Client({ connectionString: serverUrl });
  await admin.connect();
  const version = (await admin.query<{ server_version: string }>('show server_version')).rows[0]!.server_version;
  const created = new Set<string>();
  let serial = 0;

  const dropDatabase = async (name: string) => {
    await admin.query(`drop database if exists ${pg.escapeIdentifier(name)} with (force)`);
    created.delete(name);
  };
  return {
    url: serverUrl,
    embedded: pgServer !== undefined,
    version,
    urlFor: (database) => databaseUrl(serverUrl, database),
    async freshDatabase(base) {
      if (!/^bench_[a-z0-9_]+$/.test(base)) throw new Error(`refusing to create database ${base}: bench databases are named bench_*`);
      const name = `${base}_${++serial}`;
      await dropDatabase(name);
      await admin.query(`create database ${pg.escapeIdentifier(name)}`);
      created.add(name);
      return databaseUrl(serverUrl, name);
    },
    dropDatabase,
    async dropCreated() {
      for (const name of [...created]) await dropDatabase(name);
    },
    async stop() {
      // On a server we did not start, leave nothing behind.
      if (!pgServer) for (const name of [...created]) await dropDatabase(name).catch(() => {});
      await admin.end();
      if (pgServer) await pgServer.stop();
      if (dataDir) await rm(dataDir, { recursive: true, force: true });
    },
  };
}

export interface ProxyProcess {
  address: string;
  pid: number | undefined;
  stop(): Promise<void>;
}

/** Starts scripts/ws-proxy.ts as a child process and reads its address. */
export async function startProxyProcess(): Promise<ProxyProcess> {
  const child: ChildProcess = spawn(process.execPath, [join(root, 'scripts/ws-proxy.ts')], {
    cwd: root,
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const address = await new Promise<string>((resolve, reject) => {
    let out = '';
    const timer = setTimeout(() => reject(new Error('ws proxy did not start within 20 s')), 20_000);
    child.stdout!.on('data', (chunk: Buffer) => {
      out += chunk.toString();
      const m = /listening on (\S+)/.exec(out);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]!);
      }
    });
    child.once('exit', (code) => reject(new Error(`ws proxy exited (${code})`)));
  });
  // Whatever ends the bench (a crash, Ctrl-C), the proxy goes with it.
  const onExit = () => {
    if (child.exitCode === null) child.kill('SIGTERM');
  };
  process.once('exit', onExit);
  return {
    address,
    pid: child.pid,
    stop: () =>
      new Promise<void>((resolve) => {
        process.removeListener('exit', onExit);
        if (child.exitCode !== null) return resolve();
        child.once('exit', () => resolve());
        child.kill('SIGTERM');
      }),
  };
}

/** Fresh temporary directory under the OS temp dir; removed by the returned cleanup. */
export async function tempDir(prefix: string): Promise<{ path: string; remove(): Promise<void> }> {
  const path = await mkdtemp(join(tmpdir(), prefix));
  return { path, remove: () => rm(path, { recursive: true, force: true }) };
}
