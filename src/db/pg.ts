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
import { createPooledDb, rememberingTimestamps, type DbTimeouts, type PoolLike, DEFAULT_CONNECT_TIMEOUT_MS } from './pooled.ts';

export interface PgDbOptions extends DbTimeouts {
  /** `env.HYPERDRIVE.connectionString`, or any Postgres URL. */
  connectionString: string;
  /** Connections this Db may open at once (transactions take one each). */
  maxConnections?: number;
  /** Shown in pg_stat_activity. */
  applicationName?: string;
}

type Callback = (error?: unknown) => void;

interface SocketLike {
  write(data: Uint8Array | string, encoding?: BufferEncoding | Callback, callback?: Callback): true | void;
}

const CloudflareSocket = (pgCloudflare as { CloudflareSocket?: new (ssl: unknown) => SocketLike }).CloudflareSocket;

/**
 * pg-cloudflare's socket, with Node's cork()/uncork(): pg corks the stream
 * around the five messages of an extended-protocol statement (parse, bind,
 * describe, execute, sync) and, given a socket that has cork, they leave as
 * one socket write instead of five. In workerd every write is a trip
 * through the runtime's streams and a promise of its own: with one write
 * per statement an enqueue costs workerd about 5 % less CPU (BENCHMARKS.md,
 * Transports, second pass). Nothing waits on the buffer: cork and uncork
 * are called in the same synchronous section (uncork in a finally), so a
 * write is at most deferred to the end of the call that made it, and the
 * socket's error, close and end() paths are pg-cloudflare's own. Writes keep
 * their order (an empty one made while corked, as end() makes, waits for the
 * flush too), and each buffered write's callback gets the flush's result.
 */
function coalescing(Base: new (ssl: unknown) => SocketLike) {
  return class CoalescingSocket extends Base {
    /** Socket writes issued (a statement costs one): what the tests count. */
    writes = 0;
    private corked = 0;
    private buffered: Uint8Array[] = [];
    private callbacks: Callback[] = [];

    cork(): void {
      this.corked += 1;
    }

    uncork(): void {
      if (this.corked === 0) return;
      this.corked -= 1;
      if (this.corked === 0) this.flush();
    }

    override write(data: Uint8Array | string, encoding?: BufferEncoding | Callback, callback?: Callback): true | void {
      if (this.corked === 0) {
        if (data.length > 0) this.writes += 1;
        return super.write(data, encoding, callback);
      }
      const cb = typeof encoding === 'function' ? encoding : callback;
      if (data.length > 0) this.buffered.push(typeof data === 'string' ? Buffer.from(data, typeof encoding === 'string' ? encoding : 'utf8') : data);
      if (cb) this.callbacks.push(cb);
      return true;
    }

    private flush(): void {
      const chunks = this.buffered;
      const callbacks = this.callbacks;
      this.buffered = [];
      this.callbacks = [];
      const done = (error?: unknown) => {
        for (const cb of callbacks) cb(error);
      };
      if (chunks.length === 0) {
        if (callbacks.length > 0) super.write(Buffer.alloc(0), done); // calls back at once, as an empty write does
        return;
      }
      this.writes += 1;
      super.write(chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks), done);
    }
  };
}

const Socket = CloudflareSocket ? coalescing(CloudflareSocket) : undefined;

export type PgDb = Db & {
  transport: 'hyperdrive';
  connections(): number;
  /** Socket writes so far over workerd's sockets (a statement costs one); undefined in Node, whose sockets cork by themselves. */
  socketWrites(): number | undefined;
};

export function createPgDb(options: PgDbOptions): PgDb {
  const sockets: { writes: number }[] = [];
  const pool = new pg.Pool({
    ...(Socket
      ? {
          stream: ((config: { ssl?: unknown }) => {
            const socket = new Socket(config.ssl);
            sockets.push(socket);
            return socket;
          }) as never,
        }
      : {}),
    connectionString: options.connectionString,
    max: options.maxConnections ?? 4,
    application_name: options.applicationName,
    connectionTimeoutMillis: options.connectTimeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS,
    // A connection lives for one invocation: no idle timers left behind.
    idleTimeoutMillis: 0,
    types: rememberingTimestamps(pg.types),
  });
  const db = createPooledDb(pool as unknown as PoolLike, { ...options, transport: 'hyperdrive' }) as Db & {
    transport: 'hyperdrive';
    connections(): number;
  };
  return Object.assign(db, { socketWrites: () => (Socket ? sockets.reduce((n, s) => n + s.writes, 0) : undefined) });
}
