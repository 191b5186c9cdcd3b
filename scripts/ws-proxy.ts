// Development WebSocket-to-TCP proxy for the Neon serverless driver.
//
// Neon's driver speaks the Postgres wire protocol inside WebSocket frames. In
// production Neon terminates those WebSockets itself; locally and in tests this
// proxy does, so the very same driver code reaches an ordinary Postgres. The
// driver is pointed here with `neonConfig.wsProxy` and asks for its target with
// the `address` query parameter (`/v1?address=host:port`).
import { createServer, type Server } from 'node:http';
import { connect } from 'node:net';
import type { AddressInfo } from 'node:net';
import { WebSocketServer, type WebSocket } from 'ws';

export interface WsProxy {
  /** `host:port` of the proxy, for `neonConfig.wsProxy`. */
  readonly address: string;
  readonly port: number;
  close(): Promise<void>;
}

/** Only loopback targets unless told otherwise: this is a development tool. */
function allowedTarget(host: string, allowAny: boolean): boolean {
  return allowAny || host === 'localhost' || host === '127.0.0.1' || host === '::1';
}

export async function startWsProxy(options: { port?: number; host?: string; allowAnyTarget?: boolean } = {}): Promise<WsProxy> {
  const host = options.host ?? '127.0.0.1';
  const server: Server = createServer((_req, res) => {
    res.writeHead(426, { 'content-type': 'text/plain' }).end('WebSocket only\n');
  });
  const wss = new WebSocketServer({ server, path: '/v1' });
  const sockets = new Set<WebSocket>();

  wss.on('connection', (ws, req) => {
    const address = new URL(req.url ?? '/', 'http://proxy').searchParams.get('address') ?? '';
    const sep = address.lastIndexOf(':');
    const targetHost = address.slice(0, sep).replace(/^\[|\]$/g, '');
    const targetPort = Number(address.slice(sep + 1));
    if (sep <= 0 || !Number.isInteger(targetPort) || !allowedTarget(targetHost, options.allowAnyTarget ?? false)) {
      ws.close(1008, 'target not allowed');
      return;
    }
    sockets.add(ws);
    const tcp = connect({ host: targetHost, port: targetPort });
    tcp.setNoDelay(true);
    // Bytes that arrive before the TCP connection opens are buffered by net.Socket.
    ws.on('message', (data: Buffer) => tcp.write(data));
    tcp.on('data', (chunk) => {
      if (ws.readyState === ws.OPEN) ws.send(chunk);
    });
    const closeBoth = () => {
      sockets.delete(ws);
      tcp.destroy();
      if (ws.readyState === ws.OPEN || ws.readyState === ws.CONNECTING) ws.close();
    };
    ws.on('close', closeBoth);
    ws.on('error', closeBoth);
    tcp.on('close', closeBoth);
    tcp.on('error', closeBoth);
  });

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 0, host, () => resolve());
  });
  const port = (server.address() as AddressInfo).port;
  return {
    address: `${host}:${port}`,
    port,
    close: () =>
      new Promise<void>((resolve) => {
        for (const ws of sockets) ws.terminate();
        wss.close();
        server.close(() => resolve());
        // Connections still open (a handshake under way, a keep-alive) would hold close() forever.
        server.closeAllConnections();
      }),
  };
}

// Run directly: `npm run ws-proxy -- [port]`.
if (import.meta.url === `file://${process.argv[1]}`) {
  const proxy = await startWsProxy({ port: Number(process.argv[2] ?? 0) || undefined });
  console.log(`ws proxy listening on ${proxy.address}`);
}
