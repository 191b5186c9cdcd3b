// pg-boss 12, configured per its docs for throughput: one queue, inserts in
// batches of 1,000 with `insert`, and `work` with a large batchSize, burst
// fetching while batches come back full, and the shortest polling interval.
import { PgBoss } from 'pg-boss';
import pg from 'pg';
import { seedNote, type PeerDrainResult, type PeerRate } from './peers.ts';
import { delta, sampleWaits, snapshot } from './pgstats.ts';
import type { Ctx } from './context.ts';
import { databaseOf } from './server.ts';
import { cpuBetween } from './cpu.ts';
import { benchPayload, type Settings } from './settings.ts';
import { sleep } from './stats.ts';

const QUEUE = 'bench';

/** The `work` options every pg-boss run uses, and the settings print shows. */
function workOptions(s: Settings) {
  return {
    batchSize: s.pgboss.batchSize,
    localConcurrency: s.pgboss.localConcurrency,
    pollingIntervalSeconds: s.pgboss.pollingIntervalSeconds,
    burstWhenBatchFull: s.pgboss.burstWhenBatchFull,
  };
}

export function pgbossSettings(s: Settings): Record<string, unknown> {
  return {
    version: '12.38.0',
    work: workOptions(s),
    poolMax: s.pgboss.poolMax,
    insertBatch: s.batchSize,
    queue: `${QUEUE} (policy standard, not partitioned)`,
  };
}

async function startBoss(url: string, s: Settings): Promise<PgBoss> {
  const boss = new PgBoss({ connectionString: url, max: s.pgboss.poolMax, schedule: false });
  boss.on('error', (e: unknown) => process.stderr.write(`[pg-boss] ${String(e)}\n`));
  await boss.start();
  await boss.createQueue(QUEUE);
  return boss;
}

async function countJobs(url: string, where: string): Promise<number> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    return Number((await c.query<{ n: string }>(`select count(*) as n from pgboss.job where name = '${QUEUE}' and ${where}`)).rows[0]!.n);
  } finally {
    await c.end();
  }
}

export async function pgbossEnqueue(ctx: Ctx, mode: 'single' | 'batch', count?: number): Promise<PeerRate> {
  const { server, settings: s } = ctx;
  const url = await server.freshDatabase(`bench_pgboss_enqueue_${mode}`);
  const boss = await startBoss(url, s);
  try {
    const n = count ?? (mode === 'single' ? s.singleTasks : s.tasks);
    const t0 = performance.now();
    if (mode === 'batch') {
      for (let i = 0; i < n; i += s.batchSize) {
        const jobs = Array.from({ length: Math.min(s.batchSize, n - i) }, (_, k) => ({ data: benchPayload(i + k) }));
        await boss.insert(QUEUE, jobs);
      }
    } else {
      let next = 0;
      await Promise.all(
        Array.from({ length: s.singleConcurrency }, async () => {
          while (next < n) {
            const i = next++;
            await boss.send(QUEUE, benchPayload(i));
          }
        }),
      );
    }
    const seconds = (performance.now() - t0) / 1000;
    const stored = await countJobs(url, `state = 'created'`);
    if (stored !== n) throw new Error(`pg-boss ${mode} enqueue: ${stored} of ${n} stored`);
    return { tasks: n, seconds, rate: n / seconds };
  } finally {
    await boss.stop({ graceful: false, close: true });
  }
}

/** Completed history in pg-boss's own job table, as workload 4 does for the project. */
async function seedCompleted(url: string, rows: number): Promise<void> {
  if (rows === 0) return;
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    await c.query(
      `insert into pgboss.job (name, data, state, created_on, started_on, completed_on, start_after)
       select $1, '{}'::jsonb, 'completed', t, t, t + interval '5 ms', t
       from generate_series(1, $2::int) g,
            lateral (select now() - interval '6 days' + g * interval '1 ms' * (86400000.0 / $2::int)) as x(t)`,
      [QUEUE, rows],
    );
    await c.query('vacuum analyze pgboss.job');
  } finally {
    await c.end();
  }
}

export async function pgbossDrain(ctx: Ctx, finishedRows = 0): Promise<PeerDrainResult> {
  const { server, settings: s } = ctx;
  const name = finishedRows > 0 ? 'bench_pgboss_drain_1m' : 'bench_pgboss_drain';
  const url = await server.freshDatabase(name);
  const boss = await startBoss(url, s);
  let stopped = false;
  try {
    await seedCompleted(url, finishedRows);
    for (let i = 0; i < s.tasks; i += s.batchSize) {
      await boss.insert(QUEUE, Array.from({ length: Math.min(s.batchSize, s.tasks - i) }, (_, k) => ({ data: benchPayload(i + k) })));
    }
    if ((await countJobs(url, `state = 'created'`)) !== s.tasks) throw new Error('pg-boss drain set-up: jobs missing');
    const tables = ['pgboss.job_common'];
    const before = await snapshot(url, tables);
    const sampler = await sampleWaits(server.url, databaseOf(url));
    const poll = new pg.Client({ connectionString: url });
    await poll.connect();
    let handled = 0;
    const cpu0 = ctx.cpu();
    const t0 = performance.now();
    await boss.work(
      QUEUE,
      workOptions(s),
      async (jobs) => {
        handled += jobs.length;
      },
    );
    // Done when no job is left live (created, retry, active, failed): completion is a
    // statement after the handler returns, so it is read from the table (job_i14 covers it).
    for (;;) {
      const left = Number(
        (await poll.query<{ n: string }>(`select count(*) as n from pgboss.job where name = $1 and state in ('created', 'retry', 'active', 'failed')`, [QUEUE])).rows[0]!.n,
      );
      if (left === 0) break;
      if (performance.now() - t0 > 300_000) throw new Error(`pg-boss drain: ${left} jobs left after 300 s`);
      await sleep(10);
    }
    const seconds = (performance.now() - t0) / 1000;
    const cpu = cpuBetween(cpu0, ctx.cpu());
    await poll.end();
    const waits = await sampler.stop();
    await boss.stop({ graceful: true, close: true, timeout: 10_000 });
    stopped = true;
    await sleep(200);
    const after = await snapshot(url, tables);
    const completed = await countJobs(url, `state = 'completed' and completed_on > now() - interval '1 hour'`);
    if (completed !== s.tasks || handled < s.tasks) throw new Error(`pg-boss drain: ${completed} completed, ${handled} handled, of ${s.tasks}`);
    return { tasks: s.tasks, seconds, rate: s.tasks / seconds, finishedRows, pg: await delta(url, before, after), waits, cpu, note: seedNote(finishedRows) };
  } finally {
    if (!stopped) await boss.stop({ graceful: false, close: true });
  }
}

export async function pgbossLatency(ctx: Ctx, due: () => number[]): Promise<number[]> {
  const { server, settings: s } = ctx;
  const url = await server.freshDatabase('bench_pgboss_latency');
  const boss = await startBoss(url, s);
  try {
    const lateness: number[] = [];
    await boss.work<{ runAt: number }>(
      QUEUE,
      workOptions(s),
      async (jobs) => {
        const now = Date.now();
        for (const j of jobs) lateness.push(now - j.data.runAt);
      },
    );
    const instants = due();
    await boss.insert(QUEUE, instants.map((runAt) => ({ data: { runAt }, startAfter: new Date(runAt) })));
    const deadline = instants.at(-1)! + 60_000;
    while (lateness.length < instants.length) {
      if (Date.now() > deadline) throw new Error(`pg-boss latency: ${lateness.length} of ${instants.length} started`);
      await sleep(50);
    }
    await sleep(1000);
    const done = await countJobs(url, `state = 'completed'`);
    if (done !== instants.length) throw new Error(`pg-boss latency: ${done} of ${instants.length} completed`);
    return lateness;
  } finally {
    await boss.stop({ graceful: false, close: true });
  }
}
