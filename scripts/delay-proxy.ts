// A TCP proxy that adds a fixed round-trip delay: half on the way in, half on
// the way out, byte order kept. Stands in for the distance between a pooler
// (or a Worker) and the database region in `npm run bench`; any model that
// needs a slow link can reuse it (the dispatch model of issue 13).
import { connect, createServer, type Socket } from 'node:net';

export interface DelayProxy {
  /** `127.0.0.1:port` */
  address: string;
  port: number;
  /** Connections accepted so far (each one a connection set-up across the delay). */
  accepted(): number;
  close(): Promise<void>;
}

/** Forwards `from` to `to`, each chunk `delayMs` after it arrived (a constant delay keeps the order). */
function pipeDelayed(from: Socket, to: Socket, delayMs: number): void {
  from.on('data', (chunk) => {
    if (delayMs <= 0) to.write(chunk);
    else setTimeout(() => to.writable && to.write(chunk), delayMs);
  });
  from.on('end', () => setTimeout(() => to.end(), delayMs));
}

export async function startDelayProxy(options: { target: { host: string; port: number }; roundTripMs: number; port?: number }): Promise<DelayProxy> {
  const oneWay = options.roundTripMs / 2;
  const sockets = new Set<Socket>();
  let accepted = 0;
  const server = createServer((client) => {
    accepted += 1;
    client.setNoDelay(true);
    const upstream = connect(options.target);
    upstream.setNoDelay(true);
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on('error', () => {
        client.destroy();
        upstream.destroy();
      });
      s.on('close', () => sockets.delete(s));
    }
    pipeDelayed(client, upstream, oneWay);
    pipeDelayed(upstream, client, oneWay);
  });
  await new Promise<void>((resolve) => server.listen(options.port ?? 0, '127.0.0.1', resolve));
  const port = (server.address() as { port: number }).port;
  return {
    address: `127.0.0.1:${port}`,
    port,
    accepted: () => accepted,
    async close() {
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
