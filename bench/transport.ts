// Issue 14: the transports. Three measurements, each per transport:
//  - round trips per route, counted at the seam (connection set-up included),
//    with a fresh Db per request as in the Worker, a tenant key (checked once,
//    then cached) and KEY_CACHE_SECONDS=0 for the figure before the cache;
//  - enqueue latency p50/p99 through `wrangler dev`, one request at a time,
//    with a round-trip delay (BENCH_RTT_MS, default 30) injected between the
//    database and what sits in front of it: the WebSocket proxy (today's path:
//    every request opens a connection across the delay) or PgBouncer in
//    session mode (the Hyperdrive stand-in: warm server connections, only the
//    statements cross the delay);
//  - single-enqueue throughput at 10 concurrent, for one tenant and for ten,
//    as a ratio to the same server's no-database route (GET /nodb, a 404
//    answered before any database work) in the same run.
// Skipped, with a message, where PgBouncer is not installed. Each throughput
// run also records CPU per request by process (workerd, wrangler's node,
// Postgres, PgBouncer, this process with the client and the delay proxy):
// on two cores, the sum is what bounds the rate. Postgres backends that
// exited are not counted (the WebSocket path's, one per request).
//
// Knobs: BENCH_RTT_MS, BENCH_TRANSPORT_LATENCY_REQUESTS (200),
// BENCH_TRANSPORT_REQUESTS (500 per throughput run), BENCH_TRANSPORT_PHASE
// (`neon,hyperdrive`; one of them for a shorter run), and
// BENCH_TRANSPORT_PROFILE=<file.cpuprofile>: a CPU profile of workerd over the
// Hyperdrive path's one-tenant throughput run (bench/profile.ts), its top
// functions printed.
import { copyFile, readdir, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import ws from 'ws';
import { startDelayProxy, type DelayProxy } from '../scripts/delay-proxy.ts';
import { defaultConfig, type Config } from '../src/config.ts';
import { createNeonDb } from '../src/db/neon.ts';
import { createPgDb } from '../src/db/pg.ts';
import { countStatements, type Db } from '../src/db/seam.ts';
import { setQueuePaused } from '../src/db/sql/tenants.ts';
import { createRegistry } from '../src/handlers/registry.ts';
import { createApp } from '../src/http/app.ts';
import { silentLogger } from '../src/log.ts';
import { createApiKey } from '../src/tenants/keys.ts';
import { createSigningSecretStore } from '../src/tenants/signing-secrets.ts';
import { taskTypes } from '../functions/tasks.ts';
import type { Ctx } from './context.ts';
import { migrateProject, openProjectDb } from './core.ts';
import { startPgBouncer, type Pooler } from './pooler.ts';
import { processTreeCpu } from './cpu.ts';
import { startProfiler, summarizeProfile } from './profile.ts';
import { root } from './server.ts';
import { percentile, progress } from './stats.ts';
import { startWorkerDev } from './worker-http.ts';

export type TransportName = 'neon' | 'hyperdrive';

export interface RouteTrips {
  statements: number;
  connects: number;
  byName: Record<string, number>;
}

/** CPU milliseconds per request: workerd, wrangler's node, Postgres (every backend), the pooler, this process (client and delay proxy). */
export interface CpuPerRequest {
  workerd: number;
  wrangler: number;
  postgres: number;
  pooler: number;
  bench: number;
}

export interface TransportResult {
  roundTripMs: number;
  skipped?: string;
  /** route -> transport -> counts; `before` rows run with KEY_CACHE_SECONDS=0. */
  roundTrips: Record<string, Record<TransportName, RouteTrips>>;
  latency: Record<TransportName, { p50: number; p99: number; n: number }>;
  throughput: Record<
    TransportName,
    {
      noDbRps: number;
      oneTenantRps: number;
      tenTenantsRps: number;
      oneTenantRatio: number;
      tenTenantsRatio: number;
      /** CPU per request by process during each throughput run: noDb, oneTenant, tenTenants. */
      cpuMsPerRequest: Record<string, CpuPerRequest>;
    }
  >;
}

const int = (name: string, fallback: number) => {
  const v = Number(process.env[name]);
  return Number.isFinite(v) && v >= 0 && process.env[name] ? Math.floor(v) : fallback;
};

function withHostPort(url: string, address: string, password?: string): string {
  const u = new URL(url);
  const [host, port] = address.split(':');
  u.hostname = host!;
  u.port = port!;
  if (password !== undefined) u.password = password;
  return u.toString();
}

/** Counts one route per transport, a fresh Db per request (the Worker opens one per invocation). */
async function countRoundTrips(open: Record<TransportName, () => Db>, keys: string[]): Promise<TransportResult['roundTrips']> {
  const out: TransportResult['roundTrips'] = {};
  for (const [label, cacheSeconds] of [['', 5], [' (before: no key cache)', 0]] as const) {
    const config: Config = { ...defaultConfig, keyCacheMs: cacheSeconds * 1000 };
    for (const transport of Object.keys(open) as TransportName[]) {
      const app = createApp({
        config,
        registry: createRegistry(taskTypes({ config })),
        log: silentLogger,
        adminToken: 'bench-admin-token-0123456789abcdef',
        signingSecrets: createSigningSecretStore(undefined),
      });
      const pending: Promise<unknown>[] = [];
      const request = async (method: string, path: string, body?: unknown) => {
        const db = countStatements(open[transport]());
        const res = await app.request(
          `http://bench${path}`,
          { method, headers: { authorization: `Bearer ${keys[0]}`, 'content-type': 'application/json' }, body: body ? JSON.stringify(body) : undefined },
          { db: db.db, sender: { sendBatch: async () => {} }, waitUntil: (p) => pending.push(p) },
        );
        const json = (await res.json()) as { id?: string };
        const counts = { statements: db.counts.roundTrips, connects: db.counts.connects, byName: { ...db.counts.byName } };
        await Promise.allSettled(pending.splice(0));
        await db.db.close();
        return { json, counts };
      };
      await request('GET', '/v1/queues'); // the key's first check
      const created = await request('POST', '/v1/tasks', { task: 'noop', delay: 3600 });
      const got = await request('GET', `/v1/tasks/${created.json.id}`);
      const cancelled = await request('DELETE', `/v1/tasks/${created.json.id}`);
      for (const [route, r] of [['POST /v1/tasks', created], ['GET /v1/tasks/:id', got], ['DELETE /v1/tasks/:id', cancelled]] as const) {
        (out[route + label] ??= {} as Record<TransportName, RouteTrips>)[transport] = r.counts;
      }
    }
  }
  return out;
}

/** The bundle `wrangler dev` is running (it builds into .wrangler/tmp/dev-* beside its config), or null. */
async function newestDevBundle(wranglerDir: string): Promise<string | null> {
  const found: { path: string; mtime: number }[] = [];
  for (const dir of [join(wranglerDir, '.wrangler/tmp'), join(root, '.wrangler/tmp')]) {
    for (const name of await readdir(dir).catch(() => [] as string[])) {
      const path = join(dir, name, 'index.js');
      const s = await stat(path).catch(() => null);
      if (name.startsWith('dev-') && s) found.push({ path, mtime: s.mtimeMs });
    }
  }
  return found.sort((a, b) => b.mtime - a.mtime)[0]?.path ?? null;
}

async function timed<T>(fn: () => Promise<T>): Promise<number> {
  const t0 = performance.now();
  await fn();
  return performance.now() - t0;
}

export async function runTransport(ctx: Ctx): Promise<TransportResult> {
  const roundTripMs = int('BENCH_RTT_MS', 30);
  const latencyRequests = int('BENCH_TRANSPORT_LATENCY_REQUESTS', 200);
  const throughputRequests = int('BENCH_TRANSPORT_REQUESTS', 500);
  const transports = (process.env.BENCH_TRANSPORT_PHASE || 'neon,hyperdrive').split(',').map((t) => t.trim()) as TransportName[];
  const profileFile = process.env.BENCH_TRANSPORT_PROFILE || '';
  const result: TransportResult = { roundTripMs, roundTrips: {}, latency: {} as never, throughput: {} as never };

  const databaseUrl = await ctx.server.freshDatabase('bench_transport');
  await migrateProject(databaseUrl, ctx.proxy);
  const setup = await openProjectDb(databaseUrl, ctx.proxy);
  // Paused: the kick after each enqueue claims nothing and no consumer runs,
  // so the figures are the enqueue requests alone.
  await setQueuePaused(setup, { queue: 'default', paused: true });
  const keys: string[] = [];
  for (let i = 0; i < 10; i++) keys.push((await createApiKey(setup, `tenant-${i}`)).key);
  await setup.close();

  const server = new URL(databaseUrl);
  const delay: DelayProxy = await startDelayProxy({ target: { host: server.hostname, port: Number(server.port) }, roundTripMs });
  let pooler: Pooler | null = null;
  try {
    pooler = await startPgBouncer({
      upstream: { host: '127.0.0.1', port: delay.port },
      user: decodeURIComponent(server.username),
      password: decodeURIComponent(server.password),
    });
    if (!pooler) {
      result.skipped = 'PgBouncer is not installed (apt-get install -y pgbouncer): transport phase skipped';
      progress(result.skipped);
      return result;
    }
    const neonUrl = withHostPort(databaseUrl, delay.address); // today: every connection crosses the delay
    const hyperdriveUrl = withHostPort(databaseUrl, pooler.address, 'unused'); // the pooler answers set-up locally
    const open: Record<TransportName, () => Db> = {
      neon: () => createNeonDb({ connectionString: neonUrl, wsProxy: ctx.proxy, webSocketConstructor: ws, maxConnections: 4 }),
      hyperdrive: () => createPgDb({ connectionString: hyperdriveUrl, maxConnections: 4 }),
    };
    progress('transport: round trips per route');
    result.roundTrips = await countRoundTrips(open, keys);

    for (const transport of (['neon', 'hyperdrive'] as const).filter((t) => transports.includes(t))) {
      progress(`transport: wrangler dev over ${transport}, ${roundTripMs} ms round trip to the database`);
      const w = await startWorkerDev(ctx, {
        databaseUrl,
        workerDatabaseUrl: neonUrl,
        ...(transport === 'hyperdrive' ? { hyperdriveUrl } : {}),
        // Readable names in the profile; minified, a function is `dN index.js:790`.
        ...(profileFile ? { args: ['--minify=false'] } : {}),
      });
      try {
        const health = (await (await fetch(`${w.url}/healthz`)).json()) as { transport?: string };
        if (health.transport !== transport) throw new Error(`wrangler dev reports transport ${health.transport}, expected ${transport}`);
        const enqueue = async (key: string) => {
          const res = await fetch(`${w.url}/v1/tasks`, {
            method: 'POST',
            headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
            body: JSON.stringify({ task: 'noop' }),
          });
          if (res.status !== 201) throw new Error(`POST /v1/tasks: ${res.status} ${(await res.text()).slice(0, 200)}`);
          await res.arrayBuffer().catch(() => {});
        };
        const noDb = async () => {
          const res = await fetch(`${w.url}/nodb`);
          await res.arrayBuffer();
          if (res.status !== 404) throw new Error(`GET /nodb: ${res.status}`);
        };
        for (const key of keys) await enqueue(key); // warm: isolate, key cache, pool
        const samples: number[] = [];
        for (let i = 0; i < latencyRequests; i++) samples.push(await timed(() => enqueue(keys[0]!)));
        result.latency[transport] = { p50: percentile(samples, 50), p99: percentile(samples, 99), n: samples.length };

        // CPU by process while the requests run (ms per request): what the machine's two cores are spent on.
        const cpuNow = () => {
          const tree = processTreeCpu(w.pid);
          return {
            workerd: tree.workerd ?? NaN,
            wrangler: tree.node ?? NaN,
            // The WebSocket path's backends exit with their connections, taking their counters along.
            postgres: transport === 'hyperdrive' ? ctx.cpu().postgres : NaN,
            pooler: transport === 'hyperdrive' ? (processTreeCpu(pooler!.pid).pgbouncer ?? NaN) : NaN,
            bench: ctx.cpu().bench,
          };
        };
        const cpu: Record<string, CpuPerRequest> = {};
        const rate = async (label: string, call: (i: number) => Promise<void>) => {
          let next = 0;
          const before = cpuNow();
          const ms = await timed(() =>
            Promise.all(
              Array.from({ length: 10 }, async () => {
                while (next < throughputRequests) await call(next++);
              }),
            ),
          );
          const after = cpuNow();
          cpu[label] = Object.fromEntries(
            Object.keys(after).map((k) => [k, ((after[k as keyof CpuPerRequest] - before[k as keyof CpuPerRequest]) * 1000) / throughputRequests]),
          ) as unknown as CpuPerRequest;
          return (throughputRequests * 1000) / ms;
        };
        const noDbRps = await rate('noDb', () => noDb());
        const profiler = profileFile && transport === 'hyperdrive' ? await startProfiler(w.inspectorPort) : null;
        const oneTenantRps = await rate('oneTenant', () => enqueue(keys[0]!));
        if (profiler) {
          const profile = await profiler.stop();
          await writeFile(profileFile, JSON.stringify(profile));
          // The bundle beside it (wrangler removes its copy at exit): line numbers map to modules by its `// path` comments.
          const bundle = await newestDevBundle(w.dir);
          if (bundle) await copyFile(bundle, `${profileFile}.bundle.js`);
          const { lines, sampledMs, idle } = summarizeProfile(profile, 40);
          progress(`transport: CPU profile of ${throughputRequests} enqueues (${sampledMs.toFixed(0)} ms sampled, idle ${idle.toFixed(1)} %) in ${profileFile}`);
          for (const l of lines) progress(`  self ${l.self.toFixed(1).padStart(5)} %  total ${l.total.toFixed(1).padStart(5)} %  ${l.name}`);
        }
        const tenTenantsRps = await rate('tenTenants', (i) => enqueue(keys[i % 10]!));
        result.throughput[transport] = {
          noDbRps,
          oneTenantRps,
          tenTenantsRps,
          oneTenantRatio: oneTenantRps / noDbRps,
          tenTenantsRatio: tenTenantsRps / noDbRps,
          cpuMsPerRequest: cpu,
        };
        const share = (c: CpuPerRequest) =>
          Object.entries(c)
            .filter(([, v]) => Number.isFinite(v))
            .map(([k, v]) => `${k} ${v.toFixed(2)}`)
            .join(', ');
        progress(`transport ${transport}: CPU ms per request, no-db: ${share(cpu.noDb!)}; enqueue: ${share(cpu.oneTenant!)}`);
        progress(
          `transport ${transport}: enqueue p50 ${result.latency[transport].p50.toFixed(1)} ms, p99 ${result.latency[transport].p99.toFixed(1)} ms; ` +
            `10 concurrent: ${oneTenantRps.toFixed(0)}/s one tenant, ${tenTenantsRps.toFixed(0)}/s ten tenants, no-db ${noDbRps.toFixed(0)}/s`,
        );
      } finally {
        await w.stop();
      }
    }
    return result;
  } finally {
    await pooler?.stop();
    await delay.close();
  }
}
