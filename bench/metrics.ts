// GET /metrics and the dashboard's chart query over a table with and without
// a million finished rows (issue 17): their cost must follow the live work and
// the recent window, not the history. Same live set-up in both databases
// (queued and scheduled tasks of 50 tenants, 5,000 finished in the last five
// minutes); the only difference is the seeded history (seedFinishedTasks,
// as the drain-1m workload). A naive `count(*) group by status` over the same
// table is timed beside them, as the cost the partial indexes avoid.
import { readMetricsSnapshot, finishedPerMinute } from '../src/db/sql/stats.ts';
import { renderMetrics } from '../src/metrics/exposition.ts';
import type { Ctx } from './context.ts';
import { openProjectDb } from './core.ts';
import { enqueueAll, freshProjectDatabase, noopInputs, seedFinishedTasks } from './project.ts';
import { withClient } from './server.ts';
import { percentile } from './stats.ts';

export interface MetricsTiming {
  finishedRows: number;
  /** One scrape: the metrics_snapshot statement plus rendering, in ms. */
  scrapeP50Ms: number;
  scrapeP95Ms: number;
  /** The charts' per-minute statement for one tenant, in ms. */
  chartsP50Ms: number;
  /** select status, count(*) ... group by over the whole table, in ms. */
  naiveCountMs: number;
  bytes: number;
}

const TENANTS = 50;

export async function metricsScrapeTiming(ctx: Ctx, finishedRows: number, runs = 30): Promise<MetricsTiming> {
  const url = await freshProjectDatabase(ctx, finishedRows > 0 ? 'bench_project_metrics_1m' : 'bench_project_metrics');
  await seedFinishedTasks(url, finishedRows);
  await withClient(url, async (c) => {
    await c.query(
      `insert into tasks (tenant, queue, task, payload, status, run_at, created_at, updated_at, dispatched_at,
                          started_at, finished_at, attempts, vtime, claimed_by, lease_epoch)
       select 'tenant-' || (g % ${TENANTS}), 'default', 'noop', '{}'::jsonb, 'succeeded', t, t, t, t,
              t + interval '20 ms', t + interval '25 ms', 1, g, 'seed', 1
       from generate_series(1, 5000) g, lateral (select now() - g * interval '50 ms') as x(t)`,
    );
  });
  const db = await openProjectDb(url, ctx.proxy);
  try {
    for (let i = 0; i < TENANTS; i++) await enqueueAll(db, noopInputs(20), 20, `tenant-${i}`);
    await enqueueAll(db, Array.from({ length: 1000 }, (_, i) => ({ task: 'noop', payload: { i }, delay: 3600 })), 1000);
    await withClient(url, (c) => c.query('vacuum analyze tasks'));

    const scrape = async () => {
      const snapshot = await readMetricsSnapshot(db, { tenant: null, windowSeconds: 300, maxTenants: 20 });
      return renderMetrics(snapshot, { windowSeconds: 300, maxTenants: 20 });
    };
    let bytes = 0;
    for (let i = 0; i < 3; i++) bytes = (await scrape()).length;
    const scrapes: number[] = [];
    const charts: number[] = [];
    for (let i = 0; i < runs; i++) {
      let t0 = performance.now();
      await scrape();
      scrapes.push(performance.now() - t0);
      t0 = performance.now();
      await finishedPerMinute(db, { tenant: 'tenant-1', minutes: 60 });
      charts.push(performance.now() - t0);
    }
    const t0 = performance.now();
    await db.query(`select tenant, queue, status, count(*) from tasks group by 1, 2, 3`);
    const naiveCountMs = performance.now() - t0;
    return {
      finishedRows,
      scrapeP50Ms: percentile(scrapes, 50),
      scrapeP95Ms: percentile(scrapes, 95),
      chartsP50Ms: percentile(charts, 50),
      naiveCountMs,
      bytes,
    };
  } finally {
    await db.close();
  }
}
