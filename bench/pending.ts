// `npm run bench:pending`: what one single enqueue costs with BENCH_PENDING
// (default 100,000) tasks pending for its tenant, against a tenant with none
// (maxPendingTasks is checked in every enqueue statement; issue 12). Seeds the
// backlog through the core's batch enqueue (scheduled an hour ahead), then
// times BENCH_SINGLE (default 200) enqueues of one task through the core, one
// at a time, alternating the two tenants. An analysis aid for BENCHMARKS.md,
// not part of `npm run bench`.
import { enqueueTasks } from '../src/tasks/enqueue.ts';
import { BENCH_TENANT, benchConfig, benchRegistry, migrateProject, openProjectDb } from './core.ts';
import { startProxyProcess, startServer, withClient } from './server.ts';

const pending = Number(process.env.BENCH_PENDING ?? 100_000);
const singles = Number(process.env.BENCH_SINGLE ?? 200);
const server = await startServer(process.env.DATABASE_URL || undefined);
const proxy = await startProxyProcess();
try {
  const url = await server.freshDatabase('bench_pending');
  await migrateProject(url, proxy.address);
  const db = await openProjectDb(url, proxy.address);
  const deps = { db, config: benchConfig, registry: benchRegistry(benchConfig) };
  const later = { task: 'noop', payload: {}, delay: 3600 };
  const batch = Array.from({ length: 1000 }, () => later);
  for (let i = 0; i < pending; i += 1000) await enqueueTasks(deps, BENCH_TENANT, batch.slice(0, Math.min(1000, pending - i)));
  await withClient(url, (c) => c.query('vacuum analyze'));
  const times: Record<string, number[]> = { [BENCH_TENANT]: [], empty: [] };
  for (let i = 0; i < 2 * singles; i++) {
    const tenant = i % 2 === 0 ? BENCH_TENANT : 'empty';
    const start = performance.now();
    await enqueueTasks(deps, tenant, [later]);
    times[tenant]!.push(performance.now() - start);
  }
  const pct = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(p * xs.length))]!;
  const ms = (x: number) => `${x.toFixed(2)} ms`;
  console.log(`PostgreSQL ${server.version}; ${singles} single enqueues per tenant through the core`);
  for (const [tenant, xs] of Object.entries(times)) {
    const label = tenant === BENCH_TENANT ? `${pending.toLocaleString('en-US')} pending` : 'none pending';
    console.log(`${label}: median ${ms(pct(xs, 0.5))}, p90 ${ms(pct(xs, 0.9))}`);
  }
  await db.close();
} finally {
  await proxy.stop();
  await server.stop();
}
