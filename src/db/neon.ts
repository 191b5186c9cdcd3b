// The Neon transport: one of the two files in src/ that import a database
// driver (pg.ts is the other). Used when no Hyperdrive binding is configured.
//
// In production the driver reaches Neon over secure WebSockets. Locally and in
// tests it reaches an ordinary Postgres through the development proxy
// (scripts/ws-proxy.ts): `wsProxy` names it, and TLS is off because the proxy
// is on loopback. The same driver code runs in workerd and in Node; Node
// passes its WebSocket constructor (the `ws` package).
import { Pool, neonConfig, types } from '@neondatabase/serverless';
import type { Db } from './seam.ts';
import { createPooledDb, rememberingTimestamps, type DbTimeouts, type PoolLike, DEFAULT_CONNECT_TIMEOUT_MS } from './pooled.ts';

export interface NeonDbOptions extends DbTimeouts {
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

export function createNeonDb(options: NeonDbOptions): Db & { transport: 'neon'; connections(): number } {
  configureDriver(options);
  const pool = new Pool({
    connectionString: options.connectionString,
    max: options.maxConnections ?? 4,
    application_name: options.applicationName,
    connectionTimeoutMillis: options.connectTimeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS,
    types: rememberingTimestamps(types),
  });
  return createPooledDb(pool as unknown as PoolLike, { ...options, transport: 'neon' }) as Db & {
    transport: 'neon';
    connections(): number;
  };
}
