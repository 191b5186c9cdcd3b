// `npm run bench:explain`: EXPLAIN (ANALYZE, BUFFERS, WAL) of every statement
// one cycle of 100 tasks runs (batch enqueue, sweep, fenced start, fenced
// finish), over a backlog of BENCH_TASKS queued tasks and, with
// BENCH_FINISHED_ROWS, that many finished rows. Each statement is explained
// inside a transaction that is rolled back, then run for real, so the next
// step sees the state the real one left. BENCH_RUNNING claims that many
// tasks first (left running, as when the sweep is ahead of the consumers).
// BENCH_FLOW (keyed, rated, rated1) gives every task the flow control of the
// bench's flow phase. BENCH_START_BATCH starts that many of the claimed
// tasks (default: all the claim sent; a consumer's batch is at most 100).
// An analysis aid for BENCHMARKS.md,
// not part of `npm run bench`.
import { consumeBatch } from '../src/consume/consume.ts';
import type { Db, Queryable, Sql } from '../src/db/seam.ts';
import type { TaskMessage } from '../src/queue/messages.ts';
import { dispatchRunnable } from '../src/sweep/sweep.ts';
import { enqueueTasks } from '../src/tasks/enqueue.ts';
import { BENCH_TENANT, benchConfig, benchLogger, benchRegistry, migrateProject, openProjectDb } from './core.ts';
import { flowOf, seedFinishedTasks, type DrainFlow } from './project.ts';
import { startProxyProcess, startServer, withClient } from './server.ts';

class Rollback extends Error {}

function explaining(db: Db, out: (name: string, plan: string) => void): Db {
  const query = async (s: Sql | string, values?: readonly unknown[]) => {
    if (typeof s !== 'string') {
      let plan = '';
      try {
        await db.transaction(async (tx: Queryable) => {
          const rows = await tx.query<{ 'QUERY PLAN': string }>(`explain (analyze, buffers, wal, verbose off) ${s.text}`, values);
          plan = rows.map((r) => r['QUERY PLAN']).join('\n');
          throw new Rollback();
        });
      } catch (error) {
        if (!(error instanceof Rollback)) throw error;
      }
      out(s.name, plan);
    }
    return db.query(s as never, values);
  };
  return { query: query as Db['query'], transaction: (fn) => db.transaction(fn), close: () => db.close() };
}

const tasks = Number(process.env.BENCH_TASKS ?? 20_000);
const finishedRows = Number(process.env.BENCH_FINISHED_ROWS ?? 0);
const running = Number(process.env.BENCH_RUNNING ?? 0);
const flow = (process.env.BENCH_FLOW ?? 'plain') as DrainFlow;
const server = await startServer(process.env.DATABASE_URL || undefined);
const proxy = await startProxyProcess();
try {
  const url = await server.freshDatabase('bench_explain');
  await migrateProject(url, proxy.address);
  await seedFinishedTasks(url, finishedRows);
  const raw = await openProjectDb(url, proxy.address);
  const registry = benchRegistry(benchConfig);
  const inputs = Array.from({ length: 1000 }, (_, i) => ({ task: 'noop', payload: { n: i }, ...flowOf(flow, i) }));
  for (let i = 0; i + 1000 < tasks; i += 1000) await enqueueTasks({ db: raw, config: benchConfig, registry }, BENCH_TENANT, inputs);
  await withClient(url, (c) => c.query('vacuum analyze tasks'));
  const { log } = benchLogger('explain');
  if (running > 0) {
    const parked = { sendBatch: async () => undefined };
    const config = { ...benchConfig };
    let claimed = 0;
    while (claimed < running) {
      let t = 0;
      claimed += (await dispatchRunnable({ db: raw, config, sender: parked, log, workerId: 'park', elapsed: () => t++ }, { queues: ['default'], deadline: 1 })).claimed;
    }
  }
  console.log(`# ${tasks} queued tasks (the last 1,000 enqueued below), ${running} of them running, ${finishedRows} finished rows, flow ${flow}; PostgreSQL ${server.version}\n`);
  const print = (name: string, plan: string) => console.log(`## ${name}\n\n\`\`\`\n${plan}\n\`\`\`\n`);
  const db = explaining(raw, print);
  await enqueueTasks({ db, config: benchConfig, registry }, BENCH_TENANT, inputs);
  const sent: TaskMessage[] = [];
  let ticks = 0;
  await dispatchRunnable(
    { db, config: benchConfig, sender: { sendBatch: async (ms) => void sent.push(...[...ms].map((m) => m.body)) }, log, workerId: 'explain', elapsed: () => ticks++ },
    { queues: ['default'], deadline: 1 },
  );
  await consumeBatch({ db, config: benchConfig, registry, log }, sent.slice(0, Number(process.env.BENCH_START_BATCH ?? sent.length)));
  await raw.close();
} finally {
  await proxy.stop();
  await server.stop();
}
