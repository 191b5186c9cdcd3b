// A TCP proxy between the driver (behind the WebSocket proxy) and Postgres
// that can lose a server reply: the statement commits, the client never
// hears so (RELIABILITY S4, the ambiguous commit).
import { connect, createServer, type AddressInfo, type Socket } from 'node:net';

export interface ChaosProxy {
  port: number;
  /** The next client packet containing `marker` reaches the server; its reply is lost and the connection cut. */
  loseReplyTo(marker: string): Promise<void>;
  close(): Promise<void>;
}

export async function startChaosProxy(target: { host: string; port: number }): Promise<ChaosProxy> {
  let armed: { marker: string; done: () => void } | null = null;
  const sockets = new Set<Socket>();
  const server = createServer((client) => {
    const upstream = connect(target);
    sockets.add(client);
    sockets.add(upstream);
    let swallowing = false;
    client.on('data', (chunk) => {
      if (armed && chunk.includes(armed.marker)) {
        const { done } = armed;
        armed = null;
        swallowing = true;
        upstream.write(chunk);
        // Give the server time to execute and commit, then cut both ends.
        setTimeout(() => {
          client.destroy();
          upstream.destroy();
          done();
        }, 300);
        return;
      }
      upstream.write(chunk);
    });
    upstream.on('data', (chunk) => {
      if (!swallowing) client.write(chunk);
    });
    const close = () => {
      client.destroy();
      upstream.destroy();
    };
    client.on('error', close);
    upstream.on('error', close);
    client.on('close', () => upstream.end());
    upstream.on('close', () => client.destroy());
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as AddressInfo).port,
    loseReplyTo: (marker) => new Promise<void>((resolve) => (armed = { marker, done: resolve })),
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}
