// A database that hangs: accepts TCP connections and never answers a byte
// (what a SIGSTOPped Postgres looks like from the client). Also serves as the
// target of the WebSocket proxy, so both transports can be pointed at it.
import { createServer, type Socket } from 'node:net';

export interface HungServer {
  /** `127.0.0.1:port` */
  address: string;
  port: number;
  /** Connections accepted so far. */
  accepted(): number;
  close(): Promise<void>;
}

export async function startHungServer(): Promise<HungServer> {
  const sockets = new Set<Socket>();
  let accepted = 0;
  const server = createServer((socket) => {
    accepted += 1;
    sockets.add(socket);
    socket.on('error', () => {});
    socket.on('close', () => sockets.delete(socket));
    // Read and discard whatever the client sends; never write back.
    socket.resume();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
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
