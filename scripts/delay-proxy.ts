// A TCP proxy that adds a fixed round-trip delay: half on the way in, half on
// the way out, byte order kept. Stands in for the distance between a pooler
// (or a Worker) and the database region in `npm run bench`; any model that
// needs a slow link can reuse it (the dispatch model of issue 13).
import { connect, type Socket } from 'node:net';
import { listenTcp, type TcpServer } from './tcp-server.ts';

/** `accepted()` counts connections, each one a connection set-up across the delay. */
export type DelayProxy = TcpServer;

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
  return listenTcp((client, track) => {
    client.setNoDelay(true);
    const upstream = connect(options.target);
    upstream.setNoDelay(true);
    track(upstream);
    for (const s of [client, upstream]) {
      s.on('error', () => {
        client.destroy();
        upstream.destroy();
      });
    }
    pipeDelayed(client, upstream, oneWay);
    pipeDelayed(upstream, client, oneWay);
  }, options.port);
}
