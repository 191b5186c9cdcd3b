// A database that hangs: accepts TCP connections and never answers a byte
// (what a SIGSTOPped Postgres looks like from the client). Also serves as the
// target of the WebSocket proxy, so both transports can be pointed at it.
import { listenTcp, type TcpServer } from '../../scripts/tcp-server.ts';

export type HungServer = TcpServer;

export async function startHungServer(): Promise<HungServer> {
  return listenTcp((socket) => {
    socket.on('error', () => {});
    // Read and discard whatever the client sends; never write back.
    socket.resume();
  });
}
