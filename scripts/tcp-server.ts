// A TCP server on 127.0.0.1 for stand-ins (a slow link, a hung database): it
// counts the connections it accepts and, at close, destroys the sockets still
// open so close() does not wait for clients to hang up.
import { createServer, type AddressInfo, type Socket } from 'node:net';

export interface TcpServer {
  /** `127.0.0.1:port` */
  address: string;
  port: number;
  /** Connections accepted so far. */
  accepted(): number;
  close(): Promise<void>;
}

/** `track` adds another socket (e.g. an upstream connection) to those destroyed at close. */
export async function listenTcp(onConnection: (socket: Socket, track: (other: Socket) => void) => void, port = 0): Promise<TcpServer> {
  const sockets = new Set<Socket>();
  let accepted = 0;
  const track = (s: Socket) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  };
  const server = createServer((socket) => {
    accepted += 1;
    track(socket);
    onConnection(socket, track);
  });
  await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve));
  const bound = (server.address() as AddressInfo).port;
  return {
    address: `127.0.0.1:${bound}`,
    port: bound,
    accepted: () => accepted,
    async close() {
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
