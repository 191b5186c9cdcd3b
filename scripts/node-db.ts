// Opens the project's database seam from Node: the same Neon driver the Worker
// uses, over WebSockets. Neon hosts are reached directly; any other Postgres
// through an in-process development proxy.
import ws from 'ws';
import { createNeonDb } from '../src/db/neon.ts';
import type { Db } from '../src/db/seam.ts';
import { startWsProxy, type WsProxy } from './ws-proxy.ts';

export function isNeonHost(url: string): boolean {
  return /\.neon\.(tech|build)$/i.test(new URL(url).hostname);
}

let sharedProxy: Promise<WsProxy> | undefined;

/** One proxy per process, started on first use. */
export function localProxy(): Promise<WsProxy> {
  sharedProxy ??= startWsProxy();
  return sharedProxy;
}

export async function closeLocalProxy(): Promise<void> {
  const p = sharedProxy;
  sharedProxy = undefined;
  if (p) await (await p).close();
}

export async function openNodeDb(
  url: string,
  options: { maxConnections?: number; applicationName?: string; wsProxy?: string; statementTimeoutMs?: number } = {},
): Promise<Db> {
  const wsProxy = isNeonHost(url) ? undefined : (options.wsProxy ?? (await localProxy()).address);
  return createNeonDb({
    connectionString: url,
    wsProxy,
    webSocketConstructor: ws,
    maxConnections: options.maxConnections,
    applicationName: options.applicationName,
    // Tooling, tests and benchmarks run long statements (migrations, template
    // clones, 100,000-row batches) on loaded machines: no statement timeout
    // unless asked. The Worker's timeouts come from its config (functions/deps.ts).
    connectTimeoutMs: 30_000,
    statementTimeoutMs: options.statementTimeoutMs ?? 0,
  });
}
