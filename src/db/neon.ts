// The Neon adapter: the only file in src/ that imports the database driver.
//
// In production the driver reaches Neon over secure WebSockets. Locally and in
// tests it reaches an ordinary Postgres through the development proxy
// (scripts/ws-proxy.ts): `wsProxy` names it, and TLS is off because the proxy
// is on loopback. The same driver code runs in workerd and in Node; Node
// passes its WebSocket constructor (the `ws` package).
import { Pool, neonConfig, type PoolClient } from '@neondatabase/serverless';
import type { Db, Queryable, Sql } from './seam.ts';
import { translateDbError } from './errors.ts';

export interface NeonDbOptions {
  connectionString: string;
  /** `host:port` of a development WebSocket proxy; unset in production. */
  wsProxy?: string;
  /** Needed outside workerd and browsers (Node < 22 has no global WebSocket). */
  webSocketConstructor?: unknown;
  /** Connections this Db may open at once (transactions take one each). */
  maxConnections?: number;
  /** Shown in pg_stat_activity; tests terminate backends by it. */
  applicationName?: string;
}

function configureDriver(options: NeonDbOptions): void {
  if (options.webSocketConstructor) neonConfig.webSocketConstructor = options.webSocketConstructor as typeof WebSocket;
  if (options.wsProxy) {
    const proxy = options.wsProxy;
    neonConfig.wsProxy = (host, port) => `${proxy}/v1?address=${host}:${port}`;
    neonConfig.useSecureWebSocket = false;
    neonConfig.pipelineTLS = false;
    neonConfig.pipelineConnect = false;
  }
}

interface QueryResultLike {
  rows: object[];
}

async function run<R extends object>(
  client: { query(config: object): Promise<QueryResultLike> },
  sql: Sql | string,
  values: readonly unknown[] | undefined,
): Promise<R[]> {
  const config =
    typeof sql === 'string'
      ? { text: sql, values: values ? [...values] : undefined }
      : // Named: the driver prepares it once per connection and reuses it.
        { name: sql.name, text: sql.text, values: values ? [...values] : [] };
  try {
    const result = await client.query(config);
    return result.rows as R[];
  } catch (error) {
    throw translateDbError(error);
  }
}

export function createNeonDb(options: NeonDbOptions): Db {
  configureDriver(options);
  const pool = new Pool({
    connectionString: options.connectionString,
    max: options.maxConnections ?? 4,
    application_name: options.applicationName,
  });
  // An idle client's connection dropping (e.g. pg_terminate_backend) must not
  // crash the process: the pool discards it and the next query reconnects.
  pool.on('error', () => {});

  return {
    query: (sql, values) => run(pool as never, sql, values),
    async transaction(fn) {
      const client: PoolClient = await pool.connect();
      const tx: Queryable = { query: (sql, values) => run(client as never, sql, values) };
      let broken = false;
      try {
        await client.query('BEGIN');
        const result = await fn(tx);
        await client.query('COMMIT');
        return result;
      } catch (error) {
        try {
          await client.query('ROLLBACK');
        } catch {
          broken = true;
        }
        throw translateDbError(error);
      } finally {
        client.release(broken);
      }
    },
    close: () => pool.end(),
  };
}
