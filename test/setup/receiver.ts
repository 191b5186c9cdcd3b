// A webhook receiver for end-to-end tests of the built-in http task: records
// every request, answers by path (/hook/ok/*: 200, /hook/busy/*: 503 with
// Retry-After: 1, /hook/gone/*: 404, /hook/hold/*: 200 once released by
// POST /_release?path=..., or after 30 s; /hook/slow/*: 200 after 150 ms),
// and reports what it received at GET /_deliveries?path=... and the most
// requests of one path it had in flight at once at GET /_overlap?path=...
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface Delivery {
  method: string;
  path: string;
  headers: Record<string, string>;
  body: string;
  /** When the request arrived (the receiver's clock, ms since the epoch). */
  at: number;
}

export async function startReceiver(): Promise<{ url: string; close(): Promise<void> }> {
  const deliveries: Delivery[] = [];
  const held = new Map<string, (() => void)[]>();
  const released = new Set<string>();
  const inFlight = new Map<string, number>();
  const peak = new Map<string, number>();
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const url = new URL(req.url ?? '/', 'http://receiver');
      if (url.pathname === '/_deliveries') {
        const path = url.searchParams.get('path');
        res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(deliveries.filter((d) => d.path === path)));
        return;
      }
      if (url.pathname === '/_overlap') {
        const path = url.searchParams.get('path') ?? '';
        res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ peak: peak.get(path) ?? 0 }));
        return;
      }
      if (url.pathname === '/_release') {
        const path = url.searchParams.get('path') ?? '';
        released.add(path);
        for (const answer of held.get(path) ?? []) answer();
        held.delete(path);
        res.writeHead(204).end();
        return;
      }
      const headers: Record<string, string> = {};
      for (const [k, v] of Object.entries(req.headers)) if (typeof v === 'string') headers[k] = v;
      deliveries.push({ method: req.method ?? '', path: url.pathname, headers, body: Buffer.concat(chunks).toString('utf8'), at: Date.now() });
      if (url.pathname.startsWith('/hook/hold/') && !released.has(url.pathname)) {
        const answer = () => {
          clearTimeout(timer);
          if (!res.writableEnded) res.writeHead(200).end('released');
        };
        const timer = setTimeout(answer, 30_000);
        held.set(url.pathname, [...(held.get(url.pathname) ?? []), answer]);
      } else if (url.pathname.startsWith('/hook/slow/')) {
        const path = url.pathname;
        const now = (inFlight.get(path) ?? 0) + 1;
        inFlight.set(path, now);
        peak.set(path, Math.max(peak.get(path) ?? 0, now));
        setTimeout(() => {
          inFlight.set(path, (inFlight.get(path) ?? 1) - 1);
          res.writeHead(200).end('ok');
        }, 150);
      } else if (url.pathname.startsWith('/hook/busy/')) res.writeHead(503, { 'retry-after': '1' }).end('busy');
      else if (url.pathname.startsWith('/hook/gone/')) res.writeHead(404).end('no such hook');
      else res.writeHead(200).end('ok');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
