// The Hyperdrive transport: `pg` (node-postgres) over the connection string of
// the Worker's HYPERDRIVE binding. One of the two files in src/ that import a
// database driver (neon.ts is the other).
//
// Hyperdrive keeps warm connections to the database near it and hands the
// Worker a connection string to a local endpoint, so opening a connection
// costs no round trip to the database region; each statement costs one. In
// workerd `pg` opens a real TCP socket (cloudflare:sockets, through
// pg-cloudflare); in Node, an ordinary one, so the same adapter runs in the
// Node tests too. Named statements are prepared once per connection; Hyperdrive
// and PgBouncer in session mode both keep them.
import pg from 'pg';
// workerd's TCP socket for pg. Resolves to an empty module outside workerd
// (its package exports), where pg uses Node's own sockets. pg finds it by
// itself when bundled by wrangler, but not under the vitest plugin's module
// loader (its CommonJS require misses the `workerd` condition), so it is
// passed explicitly.
import * as pgCloudflare from 'pg-cloudflare';
import type { Db } from './seam.ts';
import { createPooledDb, type DbTimeouts, type PoolLike, DEFAULT_CONNECT_TIMEOUT_MS } from './pooled.ts';

export interface PgDbOptions extends DbTimeouts {
  /** `env.HYPERDRIVE.connectionString`, or any Postgres URL. */
  connectionString: string;
  /** Connections this Db may open at once (transactions take one each). */
  maxConnections?: number;
  /** Shown in pg_stat_activity. */
  applicationName?: string;
}

const CloudflareSocket = (pgCloudflare as { CloudflareSocket?: new (ssl: unknown) => unknown }).CloudflareSocket;

export function createPgDb(options: PgDbOptions): Db & { transport: 'hyperdrive'; connections(): number } {
  const pool = new pg.Pool({
    ...(CloudflareSocket ? { stream: ((config: { ssl?: unknown }) => new CloudflareSocket(config.ssl)) as never } : {}),
    connectionString: options.connectionString,
    max: options.maxConnections ?? 4,
    application_name: options.applicationName,
    connectionTimeoutMillis: options.connectTimeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS,
    // A connection lives for one invocation: no idle timers left behind.
    idleTimeoutMillis: 0,
  });
  return createPooledDb(pool as unknown as PoolLike, { ...options, transport: 'hyperdrive' }) as Db & {
    transport: 'hyperdrive';
    connections(): number;
  };
}
