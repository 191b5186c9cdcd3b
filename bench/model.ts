// The production model of dispatch (issue 13): `BENCH_PHASES=model`.
//
// Real: Postgres, the Neon serverless driver over the WebSocket proxy, the
// Worker's own handlers (functions/cron.ts and functions/queue.ts: the sweep,
// the pumps, the consumer, the dispatcher slots), the enqueue core and the
// dispatch kick. Modelled: the distance to Neon (the delay proxy, BENCH_RTT_MS
// round trip, default 30 ms), the Queue (per shard: BENCH_MODEL_QUEUE_RATE
// messages/s, 5,000 by default; BENCH_MODEL_SEND_MS per sendBatch, 20 ms;
// delivery in batches of up to 100, or fewer after 1 s, to at most
// BENCH_MODEL_CONSUMERS concurrent invocations per shard) and the cron (one
// tick a minute), and Neon's pooled endpoint (PgBouncer beside Postgres,
// behind the delay; BENCH_MODEL_POOLER=0 for direct connections).
// BENCH_MODEL_DISPATCHERS sets MAX_DISPATCHERS of the parallel design (4);
// KICK_INTERVAL_MS, when set, reaches the Workers' config as a var would.
// BENCHMARKS.md explains the parameters.
import { handleScheduled } from '../functions/cron.ts';
import { sharedFor, tasksQueue } from '../functions/deps.ts';
import type { Env } from '../functions/env.ts';
import { handleQueue } from '../functions/queue.ts';
import { createNeonDb } from '../src/db/neon.ts';
import { createKicker } from '../src/sweep/kick.ts';
import { enqueueTasks } from '../src/tasks/enqueue.ts';
import { createLogger } from '../src/log.ts';
import { startDelayProxy } from '../scripts/delay-proxy.ts';
import type { Ctx } from './context.ts';
import { benchRegistry, migrateProject, openProjectDb } from './core.ts';
import { cpuBetween, type CpuUse } from './cpu.ts';
import { startPgBouncer } from './pooler.ts';
import { withClient } from './server.ts';
import { progress, sleep } from './stats.ts';

function int(name: string, fallback: number): number {
  const raw = process.env[name];
  return raw === undefined || raw === '' ? fallback : Number(raw);
}
function list(name: string, fallback: string): string[] {
  return (process.env[name] || fallback).split(',').map((s) => s.trim()).filter(Boolean);
}

/** Server connections of the modelled pooler (Neon sizes its pooler's pool from the compute's max_connections: hundreds). */
const MODEL_POOL_SIZE = 64;

export interface ModelRun {
  workload: 'fanout' | 'sustained';
  design: 'serial' | 'parallel';
  shards: number;
  tasks: number;
  started: number;
  /** Task messages sent per second, first send to last. */
  sentPerSecond: number;
  /** Tasks finished per second, first start to last finish. */
  finishedPerSecond: number;
  /** Fan-out: tasks started per second, from the due instant to the last start. */
  startedPerSecond?: number;
  /** From the due instant (fan-out) to the first and the last start, ms. */
  firstStartMs?: number;
  lastStartMs?: number;
  dueToStartP50Ms: number;
  dueToStartP99Ms: number;
  /** Committed transactions per second over the run (each autocommit statement is one). */
  transactionsPerSecond: number;
  /** Connections the Workers opened across the delay, and the most backends at once. */
  connections: number;
  peakBackends: number;
  pumpsSent: number;
  wallSeconds: number;
  /** CPU seconds over the run: Postgres (its backends), the bench process (the Workers' code), the whole machine. */
  cpu: CpuUse;
}

export interface ModelResult {
  roundTripMs: number;
  queueRate: number;
  sendMs: number;
  consumers: number;
  /** Workers reach Postgres through a pooler beside it (Neon's pooled endpoint), or directly. */
  pooled: boolean;
  runs: ModelRun[];
}

interface Pending {
  id: number;
  body: unknown;
  visibleAt: number;
  attempts: number;
}

/** The Queue stand-in: one per shard, paced at `rate` messages/s, `sendMs` per sendBatch. */
function createModelQueue(o: { shards: number; rate: number; sendMs: number; consumers: number }) {
  let seq = 0;
  const sends: number[] = [];
  let pumps = 0;
  const shards = Array.from({ length: o.shards }, (_, i) => ({
    name: i === 0 ? 'edge-scheduler-tasks' : `edge-scheduler-tasks-${i}`,
    availableAt: 0,
    delayed: [] as Pending[],
    ready: [] as Pending[],
    readySince: 0,
    running: 0,
  }));
  const push = (shard: (typeof shards)[number], body: unknown, delaySeconds: number, attempts: number) => {
    const t = performance.now();
    const m = { id: ++seq, body, visibleAt: t + delaySeconds * 1000, attempts };
    if (delaySeconds > 0) shard.delayed.push(m);
    else {
      if (shard.ready.length === 0) shard.readySince = t;
      shard.ready.push(m);
    }
  };
  const bindings = shards.map((shard) => ({
    async sendBatch(messages: Iterable<{ body: unknown; delaySeconds?: number }>) {
      const batch = [...messages];
      await sleep(o.sendMs);
      const now = performance.now();
      const start = Math.max(now, shard.availableAt);
      shard.availableAt = start + (batch.length * 1000) / o.rate;
      if (start > now) await sleep(start - now);
      const t = performance.now();
      for (const m of batch) {
        if ((m.body as { kind?: string }).kind === 'pump') pumps += 1;
        else sends.push(t);
        push(shard, m.body, m.delaySeconds ?? 0, 1);
      }
    },
    async send(body: unknown, options: { delaySeconds?: number } = {}) {
      await this.sendBatch([{ body, ...options }]);
    },
  }));
  return { shards, bindings, sends, pumps: () => pumps, push };
}

export async function runModel(ctx: Ctx): Promise<ModelResult> {
  const roundTripMs = int('BENCH_RTT_MS', 30);
  const queueRate = int('BENCH_MODEL_QUEUE_RATE', 5000);
  const sendMs = int('BENCH_MODEL_SEND_MS', 20);
  const consumers = int('BENCH_MODEL_CONSUMERS', 32);
  const pooled = int('BENCH_MODEL_POOLER', 1) === 1;
  const dispatchers = int('BENCH_MODEL_DISPATCHERS', 4);
  const fanoutTasks = int('BENCH_MODEL_TASKS', 100_000);
  const rate = int('BENCH_MODEL_RATE', 2000);
  const seconds = int('BENCH_MODEL_SECONDS', 60);
  const designs = list('BENCH_MODEL_DESIGNS', 'serial,parallel') as ModelRun['design'][];
  const shardCounts = list('BENCH_MODEL_SHARDS', '1,4').map(Number);
  const workloads = list('BENCH_MODEL_WORKLOADS', 'fanout,sustained') as ModelRun['workload'][];
  const result: ModelResult = { roundTripMs, queueRate, sendMs, consumers, pooled, runs: [] };

  for (const workload of workloads) {
    for (const design of designs) {
      // Shards matter to the parallel design only; today's has one Queue.
      for (const shards of design === 'serial' ? [1] : shardCounts) {
        progress(`model: ${workload}, ${design} dispatch, ${shards} shard(s), ${roundTripMs} ms RTT`);
        result.runs.push(await runOne(ctx, { workload, design, shards, roundTripMs, queueRate, sendMs, consumers, fanoutTasks, rate, seconds, pooled, dispatchers }));
      }
    }
  }
  return result;
}

async function runOne(
  ctx: Ctx,
  o: {
    workload: ModelRun['workload'];
    design: ModelRun['design'];
    shards: number;
    roundTripMs: number;
    queueRate: number;
    sendMs: number;
    consumers: number;
    fanoutTasks: number;
    rate: number;
    seconds: number;
    pooled: boolean;
    dispatchers: number;
  },
): Promise<ModelRun> {
  const url = await ctx.server.freshDatabase(`bench_model_${o.workload}_${o.design}_${o.shards}`);
  await migrateProject(url, ctx.proxy);
  const server = new URL(url);
  // Neon's pooled endpoint (the connection string Neon gives serverless
  // clients): PgBouncer beside the database, so a Worker's connection crosses
  // the distance but finds a warm backend. Without it every invocation forks
  // a backend and plans its statements on cold catalog caches (measured: the
  // fenced start planned in 35 ms on average, against 1.3 ms warm).
  const pooler = o.pooled
    ? await startPgBouncer({
        upstream: { host: server.hostname, port: Number(server.port) },
        user: decodeURIComponent(server.username),
        password: decodeURIComponent(server.password),
        poolSize: MODEL_POOL_SIZE,
      })
    : null;
  if (o.pooled && !pooler) throw new Error('BENCH_MODEL_POOLER: PgBouncer is not installed (apt-get install -y pgbouncer); BENCH_MODEL_POOLER=0 models direct connections');
  const behindDelay = pooler ? { host: '127.0.0.1', port: pooler.port } : { host: server.hostname, port: Number(server.port) };
  const delay = await startDelayProxy({ target: behindDelay, roundTripMs: o.roundTripMs });
  const delayedUrl = new URL(url);
  delayedUrl.host = delay.address;
  // Paced at the Queue's rate, not the workload's (`rate` is the sustained enqueue rate).
  const q = createModelQueue({ shards: o.shards, rate: o.queueRate, sendMs: o.sendMs, consumers: o.consumers });
  const env = {
    DATABASE_URL: delayedUrl.toString(),
    DATABASE_WS_PROXY: ctx.proxy,
    DATABASE_TRANSPORT: 'neon',
    ADMIN_TOKEN: 'model',
    LOG_LEVEL: 'error',
    ...(process.env.KICK_INTERVAL_MS ? { KICK_INTERVAL_MS: process.env.KICK_INTERVAL_MS } : {}),
    MAX_DISPATCHERS: o.design === 'parallel' ? String(o.dispatchers) : '0',
    QUEUE_SHARDS: String(o.shards),
    TASKS: q.bindings[0],
    ...Object.fromEntries(q.bindings.slice(1).map((b, i) => [`TASKS_${i + 1}`, b])),
  } as unknown as Env;
  const { config } = sharedFor(env);
  const pendingWork = new Set<Promise<unknown>>();
  const track = (p: Promise<unknown>) => {
    const w = p.catch(() => {}).finally(() => pendingWork.delete(w));
    pendingWork.add(w);
  };
  const execution = () => ({ waitUntil: track, passThroughOnException() {}, props: {} }) as unknown as ExecutionContext;
  let stopped = false;

  // Consumers: per shard, batches of up to 100 (fewer once the oldest waited 1 s), at most `consumers` at once.
  const consumerLoop = async (shard: (typeof q.shards)[number]) => {
    while (!stopped) {
      const now = performance.now();
      if (shard.delayed.length > 0) {
        const still: Pending[] = [];
        for (const m of shard.delayed) {
          if (m.visibleAt <= now) {
            if (shard.ready.length === 0) shard.readySince = now;
            shard.ready.push(m);
          } else still.push(m);
        }
        shard.delayed = still;
      }
      while (shard.running < o.consumers && shard.ready.length > 0 && (shard.ready.length >= 100 || now - shard.readySince >= 1000)) {
        const taken = shard.ready.splice(0, 100);
        shard.readySince = now;
        shard.running += 1;
        const batch = {
          queue: shard.name,
          messages: taken.map((m) => ({
            id: String(m.id),
            timestamp: new Date(),
            body: m.body,
            attempts: m.attempts,
            ack() {},
            retry(opts?: { delaySeconds?: number }) {
              q.push(shard, m.body, opts?.delaySeconds ?? 0, m.attempts + 1);
            },
          })),
          ackAll() {},
          retryAll() {},
        };
        track(handleQueue(batch as never, env, execution()).finally(() => (shard.running -= 1)));
      }
      await sleep(5);
    }
  };

  // Tasks: 10 tenants, one queue.
  const setup = await openProjectDb(url, ctx.proxy, 2);
  const registry = benchRegistry(config);
  const silent = createLogger({ level: 'error' });
  const t0 = Date.now();
  let dueAt = 0;
  let total = 0;
  let enqueueLoop: Promise<void> = Promise.resolve();
  const closeAtEnd: { close(): Promise<void> }[] = [];
  const admin = await openProjectDb(url, ctx.proxy, 1);
  const dbNow = async () => (await admin.query<{ now: Date }>('select now() as now'))[0]!.now.getTime();
  let cronTicks = 0;

  const xact = async () =>
    withClient(ctx.server.url, async (c) =>
      Number((await c.query(`select xact_commit + xact_rollback as n from pg_stat_database where datname = $1`, [server.pathname.slice(1)])).rows[0].n),
    );

  if (o.workload === 'fanout') {
    // All due at one instant, 59 s after the first cron tick (the tick before sees them within its look-ahead).
    const first = await dbNow();
    dueAt = first + 5_000 + 59_000;
    const runAt = new Date(dueAt);
    for (let i = 0; i < o.fanoutTasks; i += 1000) {
      const n = Math.min(1000, o.fanoutTasks - i);
      await enqueueTasks({ db: setup, config, registry }, `tenant-${(i / 1000) % 10}`, Array.from({ length: n }, () => ({ task: 'noop', runAt })));
    }
    total = o.fanoutTasks;
  }

  const xactBefore = await xact();
  const connectsBefore = delay.accepted();
  const began = performance.now();
  // The fan-out's window opens at its due instant (before it, the look-ahead only claims and sends).
  let cpu0 = ctx.cpu();
  const cpuAtDue =
    o.workload === 'fanout' ? setTimeout(() => (cpu0 = ctx.cpu()), Math.max(0, dueAt - (await dbNow()))) : undefined;
  const loops = q.shards.map((s) => consumerLoop(s));
  let peakBackends = 0;
  const sampler = (async () => {
    while (!stopped) {
      const n = await withClient(ctx.server.url, async (c) =>
        Number((await c.query(`select count(*)::int as n from pg_stat_activity where datname = $1`, [server.pathname.slice(1)])).rows[0].n),
      ).catch(() => 0);
      peakBackends = Math.max(peakBackends, n);
      await sleep(250);
    }
  })();
  const cron = (async () => {
    // The fan-out's first tick comes 59 s before the due instant; the sustained one's at once.
    if (o.workload === 'fanout') await sleep(Math.max(0, dueAt - 59_000 - (await dbNow())));
    while (!stopped) {
      cronTicks += 1;
      track(handleScheduled({ cron: '* * * * *', scheduledTime: Date.now(), noRetry() {} } as never, env, execution()));
      for (let waited = 0; waited < 60_000 && !stopped; waited += 100) await sleep(100);
    }
  })();

  if (o.workload === 'sustained') {
    // 2,000 enqueues/s due now, in requests of 100 every 50 ms, each kicking its queue (as the HTTP route does).
    const kicker = createKicker({ intervalMs: config.kickIntervalMs });
    const apiDb = createNeonDb({ connectionString: env.DATABASE_URL, wsProxy: ctx.proxy, maxConnections: 4 });
    const perTick = Math.max(1, Math.round(o.rate / 20));
    enqueueLoop = (async () => {
      const end = performance.now() + o.seconds * 1000;
      let i = 0;
      while (performance.now() < end) {
        const tickStart = performance.now();
        const tenant = `tenant-${i++ % 10}`;
        track(
          enqueueTasks({ db: apiDb, config, registry }, tenant, Array.from({ length: perTick }, () => ({ task: 'noop' }))).then(() =>
            kicker.kick({ db: apiDb, config, sender: tasksQueue(env), pumps: tasksQueue(env), log: silent, waitUntil: track }, ['default']),
          ),
        );
        total += perTick;
        await sleep(Math.max(0, 50 - (performance.now() - tickStart)));
      }
    })();
    closeAtEnd.push(apiDb);
  }

  // Until every task has started, or 10 minutes.
  await enqueueLoop;
  const deadline = performance.now() + 600_000;
  for (;;) {
    // The pending counts (at most 16 rows a tenant), not a scan of tasks: the
    // poll must not take the cores the model measures.
    const r = await admin.query<{ n: number }>(`select coalesce(sum(n), 0)::int as n from tenant_pending_counts`);
    if (r[0]!.n === 0 && total > 0) break;
    if (performance.now() > deadline) break;
    await sleep(500);
  }
  const wallSeconds = (performance.now() - began) / 1000;
  // Before any backend exits: an exited backend takes its counters with it.
  clearTimeout(cpuAtDue);
  const cpu = cpuBetween(cpu0, ctx.cpu());
  stopped = true;
  await Promise.all([...loops, sampler, cron]);
  await Promise.all([...pendingWork]);
  for (const d of closeAtEnd) await d.close().catch(() => {});
  const xactAfter = await xact();

  const stats = (
    await admin.query<{ started: number; first_ms: number | null; last_ms: number | null; p50: number; p99: number; fin_span: number | null; n_fin: number }>(
      `select count(started_at)::int as started,
              extract(epoch from min(started_at) - $1::timestamptz) * 1000 as first_ms,
              extract(epoch from max(started_at) - $1::timestamptz) * 1000 as last_ms,
              percentile_cont(0.5) within group (order by extract(epoch from started_at - run_at) * 1000) as p50,
              percentile_cont(0.99) within group (order by extract(epoch from started_at - run_at) * 1000) as p99,
              extract(epoch from max(finished_at) - min(started_at)) as fin_span,
              count(finished_at)::int as n_fin
       from tasks`,
      [new Date(dueAt || t0)],
    )
  )[0]!;
  await admin.close();
  await setup.close();
  await delay.close();
  await pooler?.stop();
  const sentSpan = q.sends.length > 1 ? (q.sends.at(-1)! - q.sends[0]!) / 1000 : 0;
  return {
    workload: o.workload,
    design: o.design,
    shards: o.shards,
    tasks: total,
    started: stats.started,
    sentPerSecond: sentSpan > 0 ? Math.round(q.sends.length / sentSpan) : 0,
    finishedPerSecond: stats.fin_span ? Math.round(stats.n_fin / Number(stats.fin_span)) : 0,
    ...(o.workload === 'fanout'
      ? {
          firstStartMs: Math.round(Number(stats.first_ms)),
          lastStartMs: Math.round(Number(stats.last_ms)),
          startedPerSecond: Number(stats.last_ms) > 0 ? Math.round(stats.started / (Number(stats.last_ms) / 1000)) : 0,
        }
      : {}),
    dueToStartP50Ms: Math.round(Number(stats.p50)),
    dueToStartP99Ms: Math.round(Number(stats.p99)),
    transactionsPerSecond: Math.round((xactAfter - xactBefore) / wallSeconds),
    connections: delay.accepted() - connectsBefore,
    peakBackends,
    pumpsSent: q.pumps(),
    wallSeconds: Math.round(wallSeconds),
    cpu,
  };
}
