// PgBouncer in session mode, the bench's stand-in for Hyperdrive's warm pool:
// a client connection is answered by the pooler, no new backend per request.
// Debian's package (`apt-get install -y pgbouncer`); `null` where it is missing.
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { chmod, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { freePort } from '../scripts/postgres.ts';
import { tempDir } from './server.ts';
import { sleep } from './stats.ts';
import { connect } from 'node:net';

export interface Pooler {
  /** `127.0.0.1:port` */
  address: string;
  port: number;
  pid: number | undefined;
  stop(): Promise<void>;
}

const CANDIDATES = ['/usr/sbin/pgbouncer', '/usr/bin/pgbouncer', '/usr/local/bin/pgbouncer'];

export function pgbouncerBinary(): string | null {
  return CANDIDATES.find((p) => existsSync(p)) ?? null;
}

/** Session pooling in front of `upstream`; every database logs in as `user`. */
export async function startPgBouncer(options: {
  upstream: { host: string; port: number };
  user: string;
  password: string;
  poolSize?: number;
}): Promise<Pooler | null> {
  const binary = pgbouncerBinary();
  if (!binary) return null;
  const dir = await tempDir('scheduler-bench-pgbouncer-');
  await chmod(dir.path, 0o777); // PgBouncer refuses to run as root; it drops to `nobody` and writes its log here
  const port = await freePort();
  const ini = join(dir.path, 'pgbouncer.ini');
  await writeFile(
    ini,
    [
      '[databases]',
      `* = host=${options.upstream.host} port=${options.upstream.port} user=${options.user} password=${options.password}`,
      '[pgbouncer]',
      'listen_addr = 127.0.0.1',
      `listen_port = ${port}`,
      'unix_socket_dir =',
      'auth_type = any',
      'pool_mode = session',
      `default_pool_size = ${options.poolSize ?? 20}`,
      // A warm pool, as Hyperdrive keeps: with one server connection, the
      // previous client's DISCARD ALL crosses the delay and the next client
      // waits for it (measured: 2 round trips per request instead of 1).
      'min_pool_size = 4',
      // No check query before reusing a connection idle for 30 s (the
      // default): Hyperdrive hands out its warm connections without a round
      // trip, and PgBouncer's `select 1` crossed the delay. Measured: the
      // Hyperdrive path's enqueue p50 66 -> 46 ms when the WebSocket path ran
      // first and the pool idled through it.
      'server_check_delay = 3600',
      'max_client_conn = 1000',
      // Session mode: DISCARD ALL when a client leaves, so the next client's
      // named prepared statements do not collide with the previous client's.
      'server_reset_query = DISCARD ALL',
      'ignore_startup_parameters = extra_float_digits,options',
      `logfile = ${join(dir.path, 'pgbouncer.log')}`,
      'log_connections = 0',
      'log_disconnections = 0',
    ].join('\n') + '\n',
  );
  await chmod(ini, 0o644);
  const args = process.getuid?.() === 0 ? ['-u', 'nobody', ini] : [ini];
  const child: ChildProcess = spawn(binary, args, { stdio: 'ignore', detached: false });
  const stop = async () => {
    if (child.exitCode === null) {
      const exited = new Promise((r) => child.once('exit', r));
      child.kill('SIGTERM');
      await exited;
    }
    await dir.remove();
  };
  const deadline = Date.now() + 10_000;
  for (;;) {
    const up = await new Promise<boolean>((resolve) => {
      const s = connect(port, '127.0.0.1');
      s.once('connect', () => (s.destroy(), resolve(true)));
      s.once('error', () => resolve(false));
    });
    if (up) break;
    if (child.exitCode !== null || Date.now() > deadline) {
      await stop();
      throw new Error(`pgbouncer did not start (exit ${child.exitCode})`);
    }
    await sleep(50);
  }
  return { address: `127.0.0.1:${port}`, port, pid: child.pid, stop };
}
