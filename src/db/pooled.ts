// The seam over a node-postgres-style pool, shared by both transports.
//
// Both drivers (`pg` for Hyperdrive, `@neondatabase/serverless` over
// WebSockets) expose the same Pool/PoolClient shape; only pg.ts and neon.ts
// import them. This file adds what the drivers do not give us reliably in
// workerd: a hung database must not hang a request. A connection that does
// not finish its set-up within `connectTimeoutMs`, or a statement that gets
// no answer within `statementTimeoutMs`, fails with `database_unavailable`
// (503 over HTTP, a retried batch in the consumer), and its connection is
// destroyed rather than returned to the pool: a connection that missed an
// answer is out of step with its server for good.
//
// The timeout is the client's: it bounds how long a caller waits, not how
// long the server works. A statement that is slow (not hung) keeps running on
// its backend until the server notices the closed socket; statements here are
// bounded by their LIMITs, so that is short.
import { AppError } from '../errors.ts';
import type { Db, Queryable, Sql } from './seam.ts';
import { translateDbError } from './errors.ts';

/** A driver's type parsers (node-pg-types, which both drivers carry). */
export interface TypeParsers {
  getTypeParser(oid: number, format?: 'text' | 'binary'): (value: string) => unknown;
}

const TIMESTAMPTZ_OID = 1184;

/**
 * The driver's own parsers, with its timestamptz parser remembering its
 * last answer: the rows of one batch mostly share their timestamps (an
 * enqueue's 1,000 rows one creation time and, due now, one run time; a
 * claim's one run time), and parsing each was a twentieth of a batch
 * enqueue's time in the client (BENCHMARKS.md, issue 12, sixteenth pass).
 * Every call still gets a Date of its own.
 */
export function rememberingTimestamps(types: TypeParsers): TypeParsers {
  const parse = types.getTypeParser(TIMESTAMPTZ_OID, 'text');
  let lastText: string | undefined;
  let lastValue: unknown;
  const remembering = (text: string): unknown => {
    if (text !== lastText) {
      lastValue = parse(text);
      lastText = text;
    }
    return lastValue instanceof Date ? new Date(lastValue.getTime()) : lastValue;
  };
  return {
    getTypeParser: (oid, format = 'text') => (oid === TIMESTAMPTZ_OID && format === 'text' ? remembering : types.getTypeParser(oid, format)),
  };
}

/** The part of a pooled client both drivers share. */
export interface PoolClientLike {
  query(config: object): Promise<{ rows: object[] }>;
  release(destroy?: boolean | Error): void;
  on(event: 'error', listener: (error: unknown) => void): unknown;
  connection?: { stream?: { destroy?: () => unknown } };
}

export interface PoolLike {
  connect(): Promise<PoolClientLike>;
  end(): Promise<void>;
  on(event: 'error' | 'connect', listener: (arg: never) => void): unknown;
}

export type Transport = 'hyperdrive' | 'neon';

export interface DbTimeouts {
  /** Longest wait for a connection to be ready (socket, start-up, auth). */
  connectTimeoutMs?: number;
  /** Longest wait for one statement's answer. */
  statementTimeoutMs?: number;
}

/** Defaults for HTTP requests (issue 10, finding 5). */
export const DEFAULT_CONNECT_TIMEOUT_MS = 5_000;
export const DEFAULT_STATEMENT_TIMEOUT_MS = 10_000;

class Timeout extends Error {}

/** Settles with `work`, or rejects with Timeout after `ms`; the timer never outlives the race. */
function within<T>(work: Promise<T>, ms: number, what: string): Promise<T> {
  if (!(ms > 0) || !Number.isFinite(ms)) return work;
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Timeout(`${what} did not answer within ${ms} ms`)), ms);
  });
  return Promise.race([work, timeout]).finally(() => clearTimeout(timer));
}

const unavailable = (error: Timeout) => new AppError('database_unavailable', `database unavailable: ${error.message}`);

/** Closes a client's socket at once: ending politely would wait for a server that does not answer. */
function destroyClient(client: PoolClientLike, reason: Error): void {
  try {
    client.connection?.stream?.destroy?.();
  } catch {
    /* already closed */
  }
  try {
    client.release(reason);
  } catch {
    /* released already */
  }
}

export function createPooledDb(
  pool: PoolLike,
  options: DbTimeouts & { transport: Transport },
): Db & { transport: Transport; connections(): number } {
  const connectTimeoutMs = options.connectTimeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS;
  const statementTimeoutMs = options.statementTimeoutMs ?? DEFAULT_STATEMENT_TIMEOUT_MS;
  let connections = 0;
  pool.on('connect', ((client: PoolClientLike) => {
    connections += 1;
    // Every client gets an error listener for its whole life. In workerd,
    // pg-cloudflare's socket reader rejects with "This socket has been closed"
    // once a client has closed its socket; pg-cloudflare re-emits that as an
    // 'error' event, pg's Connection and Client pass it on, and a Client with
    // no 'error' listener makes EventEmitter throw inside pg-cloudflare's
    // promise callback: an unhandled rejection (vitest fails the run on it).
    // Seen with a bare pg Client closed by end(); gone with a listener. The
    // error carries nothing to act on: the client is already closed, or its
    // statement has already failed and been answered.
    client.on('error', () => {});
  }) as never);
  // An idle client's connection dropping (e.g. pg_terminate_backend) must not
  // crash the process: the pool discards it and the next query reconnects.
  pool.on('error', (() => {}) as never);

  async function acquire(): Promise<PoolClientLike> {
    const pending = pool.connect();
    try {
      return await within(pending, connectTimeoutMs, 'connect');
    } catch (error) {
      if (error instanceof Timeout) {
        // If the connection ever completes, it is not wanted any more.
        pending.then((c) => destroyClient(c, error), () => {});
        throw unavailable(error);
      }
      throw translateDbError(error);
    }
  }

  /** Runs one statement on a checked-out client; a timeout destroys the client. */
  async function run<R extends object>(client: PoolClientLike, sql: Sql | string, values: readonly unknown[] | undefined): Promise<R[]> {
    const config =
      typeof sql === 'string'
        ? { text: sql, values: values ? [...values] : undefined }
        : // Named: the driver prepares it once per connection and reuses it.
          { name: sql.name, text: sql.text, values: values ? [...values] : [] };
    const pending = client.query(config);
    try {
      const result = await within(pending, statementTimeoutMs, typeof sql === 'string' ? 'statement' : sql.name);
      return result.rows as R[];
    } catch (error) {
      if (error instanceof Timeout) {
        pending.catch(() => {}); // it fails once the socket is destroyed
        throw Object.assign(unavailable(error), { broken: true });
      }
      throw translateDbError(error);
    }
  }

  // A timed-out statement, or a connection the server dropped (terminated,
  // shut down): the client goes, never back to the pool, or the next query
  // would be handed a dead connection.
  const isBroken = (error: unknown) =>
    (error as { broken?: boolean })?.broken === true || (error as { code?: string })?.code === 'database_unavailable';

  return {
    transport: options.transport,
    connections: () => connections,
    async query(sql, values) {
      const client = await acquire();
      try {
        const rows = await run(client, sql, values);
        client.release();
        return rows as never;
      } catch (error) {
        if (isBroken(error)) destroyClient(client, error as Error);
        else client.release();
        throw error;
      }
    },
    async transaction(fn) {
      const client = await acquire();
      const tx: Queryable = { query: (sql, values) => run(client, sql, values) };
      try {
        await run(client, 'BEGIN', undefined);
        const result = await fn(tx);
        await run(client, 'COMMIT', undefined);
        client.release();
        return result;
      } catch (error) {
        if (isBroken(error)) {
          destroyClient(client, error as Error);
          throw error;
        }
        try {
          await run(client, 'ROLLBACK', undefined);
          client.release();
        } catch (rollbackError) {
          destroyClient(client, rollbackError as Error);
        }
        throw translateDbError(error);
      }
    },
    async close() {
      // Bounded like everything else: a hung server must not hold the
      // invocation open past its answer.
      await within(pool.end(), connectTimeoutMs, 'close').catch(() => {});
    },
  };
}
