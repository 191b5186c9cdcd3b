// Enqueue over HTTP through the real Worker: `wrangler dev` (workerd, the
// Worker's own bundle and bindings) against the bench database, the admin
// token for auth, the Neon driver through the WebSocket proxy, one database
// connection per request as in production.
//
// The `default` queue is paused while enqueueing: an enqueue due now kicks a
// dispatch of its queue after answering (src/sweep/kick.ts), and with the queue
// running that would start the local Queue consumer inside the same workerd
// and measure draining too. Paused, the kick still runs its one claim
// statement (which finds the queue paused and claims nothing), so the figure
// is the full cost of an enqueue request and nothing else. The peers'
// one-at-a-time calls are likewise measured with no worker running.
import { randomBytes } from 'node:crypto';
import { ensureDashboardBuilt } from '../scripts/dashboard.ts';
import { hyperdriveConfig, startWranglerDev } from '../scripts/worker-dev.ts';
import { setQueuePaused } from '../src/db/sql/tenants.ts';
import type { Ctx } from './context.ts';
import { migrateProject, openProjectDb } from './core.ts';
import { withClient } from './server.ts';

export interface WorkerDev {
  url: string;
  inspectorPort: number;
  /** wrangler's directory for this run (see WranglerDev). */
  dir: string;
  /** wrangler's process; workerd is its descendant. */
  pid: number | undefined;
  adminToken: string;
  databaseUrl: string;
  stop(): Promise<void>;
}

export interface WorkerDevOptions {
  /** A database already migrated and prepared (default: a fresh one). */
  databaseUrl?: string;
  /** The URL the Worker's Neon driver dials (default: databaseUrl), e.g. through a delay proxy. */
  workerDatabaseUrl?: string;
  /** Runs the Worker over a HYPERDRIVE binding whose local connection string is this. */
  hyperdriveUrl?: string;
  /** More `wrangler dev` arguments (the profile runs pass --minify=false, for readable names). */
  args?: readonly string[];
}

export async function startWorkerDev(ctx: Ctx, options: WorkerDevOptions = {}): Promise<WorkerDev> {
  // wrangler.toml serves the dashboard's build as static assets.
  await ensureDashboardBuilt();
  let databaseUrl = options.databaseUrl;
  if (!databaseUrl) {
    databaseUrl = await ctx.server.freshDatabase('bench_project_http');
    await migrateProject(databaseUrl, ctx.proxy);
    const db = await openProjectDb(databaseUrl, ctx.proxy);
    await setQueuePaused(db, { queue: 'default', paused: true });
    await db.close();
  }

  const adminToken = `adm_${randomBytes(24).toString('base64url')}`;
  // wrangler dev's local observability (on by default since wrangler 4.15x)
  // stores every tail event of the Worker (spans, logs) in a SQLite-backed
  // Durable Object inside the same workerd: 0.3-0.6 ms of workerd CPU per
  // request, more for requests with more spans (a database connection is
  // one). Production has no such store on the Worker's thread, so the bench
  // turns it off; BENCH_LOCAL_OBSERVABILITY=1 keeps it, for the figures
  // measured before 2026-12-01 (BENCHMARKS.md, Transports).
  const observability: Record<string, string> = process.env.BENCH_LOCAL_OBSERVABILITY === '1' ? {} : { X_LOCAL_OBSERVABILITY: 'false' };
  const w = await startWranglerDev({
    vars: {
      DATABASE_URL: options.workerDatabaseUrl ?? databaseUrl,
      DATABASE_WS_PROXY: ctx.proxy,
      ADMIN_TOKEN: adminToken,
      SIGNING_SECRET: `whsec_${randomBytes(32).toString('base64')}`,
    },
    args: options.args ?? [],
    ...(options.hyperdriveUrl
      ? { config: await hyperdriveConfig('bench'), env: { ...observability, CLOUDFLARE_HYPERDRIVE_LOCAL_CONNECTION_STRING_HYPERDRIVE: options.hyperdriveUrl } }
      : { env: observability }),
  });
  return { url: w.url, inspectorPort: w.inspectorPort, dir: w.dir, pid: w.pid, adminToken, databaseUrl, stop: w.stop };
}

/** Empties the task tables between repetitions (the Worker keeps its DATABASE_URL). */
async function truncate(w: WorkerDev): Promise<void> {
  await withClient(w.databaseUrl, (c) => c.query('truncate tasks, tenants, tenant_pending_counts restart identity'));
}

async function stored(w: WorkerDev): Promise<number> {
  return withClient(w.databaseUrl, async (c) => Number((await c.query<{ n: string }>(`select count(*) as n from tasks where status = 'queued'`)).rows[0]!.n));
}

export interface HttpRate {
  tasks: number;
  seconds: number;
  rate: number;
  /** Requests per second (the batch mode sends 1,000 tasks per request). */
  requests: number;
}

export async function httpEnqueue(ctx: Ctx, w: WorkerDev, mode: 'single' | 'batch', count?: number): Promise<HttpRate> {
  const s = ctx.settings;
  await truncate(w);
  const n = count ?? (mode === 'single' ? s.httpSingleTasks : s.tasks);
  const headers = { authorization: `Bearer ${w.adminToken}`, 'content-type': 'application/json', 'x-tenant': 'bench' };
  const post = async (path: string, body: unknown, expect: number) => {
    const res = await fetch(`${w.url}${path}`, { method: 'POST', headers, body: JSON.stringify(body) });
    const text = await res.text();
    if (res.status !== expect) throw new Error(`POST ${path}: ${res.status} ${text.slice(0, 300)}`);
  };
  let requests = 0;
  const t0 = performance.now();
  if (mode === 'single') {
    let next = 0;
    await Promise.all(
      Array.from({ length: s.singleConcurrency }, async () => {
        while (next < n) {
          const i = next++;
          await post('/v1/tasks', { task: 'noop', payload: { n: i } }, 201);
          requests += 1;
        }
      }),
    );
  } else {
    for (let i = 0; i < n; i += s.batchSize) {
      const tasks = Array.from({ length: Math.min(s.batchSize, n - i) }, (_, k) => ({ task: 'noop', payload: { n: i + k } }));
      await post('/v1/tasks/batch', { tasks }, 201);
      requests += 1;
    }
  }
  const seconds = (performance.now() - t0) / 1000;
  const got = await stored(w);
  if (got !== n) throw new Error(`HTTP ${mode} enqueue: ${got} of ${n} tasks stored`);
  return { tasks: n, seconds, rate: n / seconds, requests: requests / seconds };
}
