// This project's workloads through its core: batch enqueue (enqueueTasks),
// drain (sweepOnce + consumeBatch over the in-process hand-off), due-to-start
// latency with the look-ahead dispatch, statement counts at the seam, and
// fair-queuing shares.
import { countStatements, type Db } from '../src/db/seam.ts';
import { setTenantWeight } from '../src/db/sql/tenants.ts';
import { consumeBatch } from '../src/consume/consume.ts';
import type { TaskMessage } from '../src/queue/messages.ts';
import { dispatchRunnable, invocationId, sweepOnce } from '../src/sweep/sweep.ts';
import { claimTasks, markDispatched } from '../src/db/sql/tasks-dispatch.ts';
import { finishIfRunning, startIfClaimed } from '../src/db/sql/tasks-fence.ts';
import { enqueueTasks, type TaskInput } from '../src/tasks/enqueue.ts';
import {
  backendPidOf,
  BENCH_TENANT,
  benchConfig,
  benchLogger,
  benchRegistry,
  benchTransport,
  createProbe,
  migrateProject,
  openProjectDb,
  startPipeline,
  timeStatements,
  type StatementTimes,
} from './core.ts';
import { createHandoff } from './handoff.ts';
import { delta, sampleWaits, snapshot, type Delta } from './pgstats.ts';
import type { Ctx } from './context.ts';
import { cpuBetween, type CpuUse } from './cpu.ts';
import { databaseOf, withClient } from './server.ts';
import { benchPayload, type Settings } from './settings.ts';
import { percentile, sleep } from './stats.ts';

export type { Ctx };

export async function freshProjectDatabase(ctx: Ctx, name: string): Promise<string> {
  const url = await ctx.server.freshDatabase(name);
  await migrateProject(url, ctx.proxy);
  return url;
}

async function countTasks(url: string, where: string): Promise<number> {
  return withClient(url, async (c) => Number((await c.query<{ n: string }>(`select count(*) as n from tasks where ${where}`)).rows[0]!.n));
}

export function noopInputs(n: number): TaskInput[] {
  return Array.from({ length: n }, (_, i) => ({ task: 'noop', payload: benchPayload(i) }));
}

export async function enqueueAll(db: Db, inputs: readonly TaskInput[], batch: number, tenant = BENCH_TENANT): Promise<void> {
  const registry = benchRegistry(benchConfig);
  for (let i = 0; i < inputs.length; i += batch) {
    await enqueueTasks({ db, config: benchConfig, registry }, tenant, inputs.slice(i, i + batch));
  }
}

// ---------------------------------------------------------------------------
// 1. Batch enqueue through the core

export interface RateResult {
  tasks: number;
  seconds: number;
  rate: number;
}

/** Over the bench's transport unless told: the table shows it over both (Neon's WebSocket path and pg). */
export async function projectEnqueueBatch(ctx: Ctx, transport = benchTransport): Promise<RateResult> {
  const { tasks, batchSize } = ctx.settings;
  const url = await freshProjectDatabase(ctx, 'bench_project_enqueue');
  const db = await openProjectDb(url, ctx.proxy, 1, transport);
  const inputs = noopInputs(tasks);
  try {
    const t0 = performance.now();
    await enqueueAll(db, inputs, batchSize);
    const seconds = (performance.now() - t0) / 1000;
    const n = await countTasks(url, `status = 'queued'`);
    if (n !== tasks) throw new Error(`project batch enqueue: ${n} of ${tasks} tasks stored`);
    return { tasks, seconds, rate: tasks / seconds };
  } finally {
    await db.close();
  }
}

// ---------------------------------------------------------------------------
// 2 and 4. Drain (optionally over a table already holding finished rows)

export interface DrainResult extends RateResult {
  finishedRows: number;
  pg: Delta;
  waits: { samples: number; busy: number; waits: Record<string, number> };
  statements: StatementTimes;
  cpu: CpuUse;
  problems: number;
  sweepErrors: number;
  deadlocks: number;
  retriedMessages: number;
}

/** Inserts finished history in one statement, then VACUUM ANALYZE (issue 7, workload 4). */
export async function seedFinishedTasks(url: string, rows: number): Promise<void> {
  if (rows === 0) return;
  await withClient(url, async (c) => {
    await c.query(
      `insert into tasks (tenant, queue, task, payload, status, run_at, created_at, updated_at, dispatched_at,
                          started_at, finished_at, attempts, vtime, claimed_by, lease_epoch)
       select 'history', 'default', 'noop', '{}'::jsonb, 'succeeded', t, t, t, t, t, t + interval '5 ms', 1, g, 'seed', 1
       from generate_series(1, $1::int) g,
            lateral (select now() - interval '6 days' + g * interval '1 ms' * (86400000.0 / $1::int)) as x(t)`,
      [rows],
    );
    await c.query('vacuum analyze tasks');
  });
}

/**
 * Flow control on every task of the drain (issue 16, the `flow` phase):
 * `keyed`, one concurrency key of limit 1,000; `rated`, rate limits that never
 * bind (what they cost, not what they hold back): the tasks spread over
 * RATED_KEYS keys of 10,000 per second each, the largest limit a key may
 * have; `rated1`, all under one such key. The plain drain passed 10,000/s
 * once claims took 500, so one key's largest limit binds near the plain rate.
 */
export type DrainFlow = 'plain' | 'keyed' | 'rated' | 'rated1';
export const DRAIN_FLOWS: readonly DrainFlow[] = ['plain', 'keyed', 'rated', 'rated1'];
const RATED_KEYS = 4;
export const flowOf = (flow: DrainFlow, i: number): Partial<TaskInput> =>
  flow === 'keyed'
    ? { concurrency: { key: 'bench', limit: 1000 } }
    : flow === 'rated'
      ? { rateLimit: { key: `bench-${i % RATED_KEYS}`, limit: 10_000, periodSeconds: 1 } }
      : flow === 'rated1'
        ? { rateLimit: { key: 'bench', limit: 10_000, periodSeconds: 1 } }
        : {};

export async function projectDrain(ctx: Ctx, finishedRows: number, flow?: DrainFlow): Promise<DrainResult> {
  const s = ctx.settings;
  const name = finishedRows > 0 ? 'bench_project_drain_1m' : flow ? `bench_project_drain_${flow}` : 'bench_project_drain';
  const url = await freshProjectDatabase(ctx, name);
  await seedFinishedTasks(url, finishedRows);
  const setup = await openProjectDb(url, ctx.proxy);
  try {
    const inputs = noopInputs(s.tasks).map((t, i) =>
      flow
        ? { ...t, ...flowOf(flow, i) }
        : s.drainConcurrencyLimit > 0
          ? { ...t, concurrency: { key: 'bench', limit: s.drainConcurrencyLimit } }
          : t,
    );
    await enqueueAll(setup, inputs, s.batchSize);
  } finally {
    await setup.close();
  }
  await withClient(url, (c) => c.query('analyze tasks'));
  const queued = await countTasks(url, `status = 'queued'`);
  if (queued !== s.tasks) throw new Error(`drain set-up: ${queued} of ${s.tasks} queued`);

  const times: StatementTimes = {};
  const open = async () => {
    const db = await openProjectDb(url, ctx.proxy);
    return timeStatements(db, times, await backendPidOf(db));
  };
  const sweepDbs = await Promise.all(Array.from({ length: s.sweepers }, open));
  const consumerDbs = await Promise.all(Array.from({ length: s.consumers }, open));
  const before = await snapshot(url, ['public.tasks', 'public.dispatch_marks']);
  const sampler = await sampleWaits(ctx.server.url, databaseOf(url));
  const handoff = createHandoff();
  const cpu0 = ctx.cpu();
  const t0 = performance.now();
  const pipeline = startPipeline({
    sweepDbs,
    consumerDbs,
    handoff,
    config: benchConfig,
    registry: benchRegistry(benchConfig),
    expected: s.tasks,
    queueBatch: s.queueBatch,
    sweepIdleMs: s.sweepIdleMs,
    label: name,
  });
  try {
    await pipeline.done;
  } finally {
    await pipeline.stop();
  }
  const seconds = (performance.now() - t0) / 1000;
  const cpu = cpuBetween(cpu0, ctx.cpu());
  const waits = await sampler.stop();
  await Promise.all([...sweepDbs, ...consumerDbs].map((d) => d.close()));
  await sleep(200);
  const after = await snapshot(url, ['public.tasks', 'public.dispatch_marks']);
  const finished = await countTasks(url, `status = 'succeeded' and tenant = '${BENCH_TENANT}'`);
  if (finished !== s.tasks) throw new Error(`${name}: ${finished} of ${s.tasks} tasks succeeded`);
  const rest = await countTasks(url, `tenant = '${BENCH_TENANT}' and status <> 'succeeded'`);
  if (rest !== 0) throw new Error(`${name}: ${rest} tasks not succeeded`);
  return {
    tasks: s.tasks,
    seconds,
    rate: s.tasks / seconds,
    finishedRows,
    pg: await delta(url, before, after),
    waits,
    statements: times,
    cpu,
    problems: pipeline.problems(),
    sweepErrors: pipeline.sweepErrors(),
    deadlocks: pipeline.deadlocks(),
    retriedMessages: pipeline.retriedMessages(),
  };
}

// ---------------------------------------------------------------------------
// 3. Due-to-start latency

export interface LatencyResult {
  tasks: number;
  p50: number;
  p95: number;
  p99: number;
  max: number;
  min: number;
}

export function latencySummary(samples: readonly number[]): LatencyResult {
  return {
    tasks: samples.length,
    p50: percentile(samples, 50),
    p95: percentile(samples, 95),
    p99: percentile(samples, 99),
    max: Math.max(...samples),
    min: Math.min(...samples),
  };
}

/** Evenly spread due instants (ms since epoch), `lead` ms from now. */
export function dueInstants(s: Settings): number[] {
  const start = Date.now() + s.latencyLeadMs;
  return Array.from({ length: s.latencyTasks }, (_, i) => Math.round(start + (i * s.latencySpreadMs) / s.latencyTasks));
}

export async function projectLatency(ctx: Ctx): Promise<LatencyResult> {
  const s = ctx.settings;
  const url = await freshProjectDatabase(ctx, 'bench_project_latency');
  const probe = createProbe();
  const registry = benchRegistry(benchConfig, [probe.handler]);
  const sweepDbs = [await openProjectDb(url, ctx.proxy)];
  const consumerDbs = await Promise.all(Array.from({ length: s.consumers }, () => openProjectDb(url, ctx.proxy)));
  const enqueueDb = await openProjectDb(url, ctx.proxy);
  const handoff = createHandoff();
  // The cron's stand-in: a sweep every tickMs, as `npm start`'s ticker does.
  const pipeline = startPipeline({
    sweepDbs,
    consumerDbs,
    handoff,
    config: benchConfig,
    registry,
    expected: s.latencyTasks,
    queueBatch: s.queueBatch,
    sweepIdleMs: s.sweepIdleMs,
    tickMs: s.tickMs,
    label: 'project latency',
    stallMs: s.latencySpreadMs + 60_000,
  });
  try {
    const due = dueInstants(s);
    const results = await enqueueTasks(
      { db: enqueueDb, config: benchConfig, registry },
      BENCH_TENANT,
      due.map((runAt) => ({ task: 'bench-probe', payload: { runAt }, runAt: new Date(runAt) })),
    );
    // What POST /v1/tasks/batch does after answering (src/sweep/kick.ts): work
    // due within the look-ahead is born queued, so it is claimed and sent
    // with delaySeconds now rather than at the next tick.
    const { log } = benchLogger('project latency kick');
    if (results.some((r) => r.task?.status === 'queued')) {
      await dispatchRunnable({ db: enqueueDb, config: benchConfig, sender: handoff, log, workerId: invocationId('kick') }, { queues: ['default'] });
    }
    await pipeline.done;
  } finally {
    await pipeline.stop();
    await Promise.all([...sweepDbs, ...consumerDbs, enqueueDb].map((d) => d.close()));
  }
  const finished = await countTasks(url, `status = 'succeeded'`);
  if (finished !== s.latencyTasks) throw new Error(`project latency: ${finished} of ${s.latencyTasks} succeeded`);
  return latencySummary([...probe.lateness.values()]);
}

// ---------------------------------------------------------------------------
// 5. Statements and round trips per 100 tasks

export interface StepCount {
  tasks: number;
  statements: number;
  roundTrips: number;
  per100: { statements: number; roundTrips: number };
  byName: Record<string, number>;
}

function stepCount(tasks: number, counts: { roundTrips: number; byName: Record<string, number> }): StepCount {
  const statements = Object.values(counts.byName).reduce((a, b) => a + b, 0);
  return {
    tasks,
    statements,
    roundTrips: counts.roundTrips,
    per100: { statements: (statements * 100) / tasks, roundTrips: (counts.roundTrips * 100) / tasks },
    byName: { ...counts.byName },
  };
}

export async function projectStatements(ctx: Ctx): Promise<{ enqueue: StepCount; sweep: StepCount; consume: StepCount; total: StepCount }> {
  const n = Math.min(ctx.settings.tasks, 10_000);
  const url = await freshProjectDatabase(ctx, 'bench_project_statements');
  const raw = await openProjectDb(url, ctx.proxy);
  const counted = countStatements(raw);
  const { log } = benchLogger('statements');
  const registry = benchRegistry(benchConfig);
  try {
    counted.reset();
    await enqueueAll(counted.db, noopInputs(n), ctx.settings.batchSize);
    const enqueue = stepCount(n, counted.counts);

    const handoff = createHandoff();
    counted.reset();
    // One cron tick takes the whole backlog: reap, materialize, promote, claim and dispatch per 100, purge.
    const swept = await sweepOnce({ db: counted.db, config: benchConfig, sender: handoff, log, workerId: 'bench-count' });
    if (swept.dispatched !== n) throw new Error(`statements: one sweep dispatched ${swept.dispatched} of ${n}`);
    const sweep = stepCount(n, counted.counts);

    counted.reset();
    let done = 0;
    handoff.close();
    for (;;) {
      const batch: TaskMessage[] = await handoff.receive(ctx.settings.queueBatch);
      if (batch.length === 0) break;
      const out = await consumeBatch({ db: counted.db, config: benchConfig, registry, log }, batch);
      done += out.results.filter((r) => r.status === 'succeeded').length;
    }
    if (done !== n) throw new Error(`statements: consumed ${done} of ${n}`);
    const consume = stepCount(n, counted.counts);
    const merged: Record<string, number> = {};
    for (const step of [enqueue, sweep, consume]) for (const [k, v] of Object.entries(step.byName)) merged[k] = (merged[k] ?? 0) + v;
    const total = stepCount(n, { roundTrips: enqueue.roundTrips + sweep.roundTrips + consume.roundTrips, byName: merged });
    return { enqueue, sweep, consume, total };
  } finally {
    await raw.close();
  }
}

// ---------------------------------------------------------------------------
// 6. Fairness

export interface FairnessResult {
  weights: Record<string, number>;
  /** Claims in the window where every tenant still had work queued. */
  window: number;
  share: Record<string, number>;
  expected: Record<string, number>;
  /** Largest |share - expected| over tenants, in percentage points. */
  maxErrorPoints: number;
  late: {
    tenant: string;
    tasks: number;
    /** Claims made by anyone between the late tenant's enqueue and its first claim. */
    firstClaimAfter: number;
    /** p99 and max of the claims between two consecutive claims of the late tenant (ideal: 1/share). */
    gapP99: number;
    gapMax: number;
    idealGap: number;
  };
}

/**
 * Tenants `big1` (weight 1) and `big3` (weight 3) each queue a backlog; once
 * a third of it is claimed, `small` (weight 1) queues a small burst. Claims go
 * through the sweep's own dispatch (dispatchRunnable: one claim statement of
 * 100, send, mark), one batch at a time, and the claim order is read from the
 * messages sent.
 */
export async function projectFairness(ctx: Ctx): Promise<FairnessResult> {
  const s = ctx.settings;
  const url = await freshProjectDatabase(ctx, 'bench_project_fairness');
  const db = await openProjectDb(url, ctx.proxy);
  const { log } = benchLogger('fairness');
  const weights: Record<string, number> = { big1: 1, big3: 3, small: 1 };
  const order: string[] = [];
  const tenantOf = new Map<string, string>();
  const sender = {
    async sendBatch(messages: Iterable<{ body: TaskMessage }>) {
      for (const m of messages) order.push(m.body.id);
    },
  };
  const config = { ...benchConfig, sweepBatchSize: 100 };
  const registry = benchRegistry(config);
  // One batch: the injected budget clock reads 0 before the first batch and 1
  // (= the deadline) before the second, so dispatchRunnable stops after one.
  const claimOneBatch = async () => {
    let ticks = 0;
    const c = await dispatchRunnable(
      { db, config, sender, log, workerId: 'bench-fair', elapsed: () => ticks++ },
      { queues: ['default'], deadline: 1 },
    );
    return c.claimed;
  };
  const enqueueFor = async (tenant: string, n: number) => {
    for (let i = 0; i < n; i += s.batchSize) {
      const res = await enqueueTasks({ db, config, registry }, tenant, noopInputs(Math.min(s.batchSize, n - i)));
      for (const r of res) tenantOf.set(r.task!.id, tenant);
    }
  };
  let arrival: number;
  try {
    for (const [tenant, weight] of Object.entries(weights)) await setTenantWeight(db, { queue: 'default', tenant, weight });
    await enqueueFor('big1', s.fairnessBacklog);
    await enqueueFor('big3', s.fairnessBacklog);
    while (order.length < Math.floor((2 * s.fairnessBacklog) / 3)) await claimOneBatch();
    arrival = order.length;
    await enqueueFor('small', s.fairnessLate);
    while ((await claimOneBatch()) > 0);
  } finally {
    await db.close();
  }
  const total: Record<string, number> = { big1: s.fairnessBacklog, big3: s.fairnessBacklog, small: s.fairnessLate };
  if (order.length !== 2 * s.fairnessBacklog + s.fairnessLate) throw new Error(`fairness: ${order.length} claims`);

  // The window after the small tenant's arrival while every tenant still had work.
  const claimed: Record<string, number> = { big1: 0, big3: 0, small: 0 };
  for (let i = 0; i < arrival; i++) claimed[tenantOf.get(order[i]!)!]! += 1;
  const inWindow: Record<string, number> = { big1: 0, big3: 0, small: 0 };
  let window = 0;
  const smallPositions: number[] = [];
  for (let i = arrival; i < order.length; i++) {
    const t = tenantOf.get(order[i]!)!;
    if (t === 'small') smallPositions.push(i);
    if (Object.keys(total).every((k) => claimed[k]! < total[k]!)) {
      inWindow[t]! += 1;
      window += 1;
    }
    claimed[t]! += 1;
  }
  const sum = Object.values(weights).reduce((a, b) => a + b, 0);
  const share: Record<string, number> = {};
  const expected: Record<string, number> = {};
  let maxErrorPoints = 0;
  for (const [t, w] of Object.entries(weights)) {
    share[t] = inWindow[t]! / window;
    expected[t] = w / sum;
    maxErrorPoints = Math.max(maxErrorPoints, Math.abs(share[t]! - expected[t]!) * 100);
  }
  const gaps = smallPositions.slice(1).map((p, i) => p - smallPositions[i]!);
  return {
    weights,
    window,
    share,
    expected,
    maxErrorPoints,
    late: {
      tenant: 'small',
      tasks: s.fairnessLate,
      firstClaimAfter: smallPositions[0]! - arrival,
      gapP99: percentile(gaps, 99),
      gapMax: Math.max(...gaps),
      idealGap: sum / weights.small!,
    },
  };
}

// ---------------------------------------------------------------------------
// 9. Fenced writes with many tasks running (issue 12)

export interface FencedResult {
  running: number;
  rounds: number;
  /** Wall-clock milliseconds of the fenced start and fenced finish of 100 claimed tasks, median over the rounds. */
  startMs: number;
  finishMs: number;
  totalMs: number;
}

/**
 * The fenced start and finish of 100 claimed tasks, `rounds` times, after
 * `running` other tasks were claimed and marked dispatched and left running
 * (long tasks in flight). Statistics are taken before those claims, while
 * nothing ran, which is when the planner once read every running task.
 */
export async function projectFencedWrites(ctx: Ctx, running: number, rounds = 20): Promise<FencedResult> {
  const url = await freshProjectDatabase(ctx, `bench_project_fenced_${running}`);
  const db = await openProjectDb(url, ctx.proxy);
  const batch = 100;
  try {
    await enqueueAll(db, noopInputs(running + rounds * batch), ctx.settings.batchSize);
    await withClient(url, (c) => c.query('vacuum analyze tasks'));
    const claim = async () => {
      const claimToken = crypto.randomUUID();
      const { claimed } = await claimTasks(db, { queue: 'default', limit: batch, claimedBy: 'bench-fenced', leaseSeconds: benchConfig.claimLeaseSeconds, claimToken });
      await markDispatched(db, { claimTokens: [claimToken], tasks: claimed });
      if (claimed.length !== batch) throw new Error(`fenced: claimed ${claimed.length}`);
      return claimed;
    };
    for (let parked = 0; parked < running; parked += batch) await claim();
    const starts: number[] = [];
    const finishes: number[] = [];
    const totals: number[] = [];
    for (let r = 0; r < rounds; r++) {
      const claimed = await claim();
      const t0 = performance.now();
      const { started } = await startIfClaimed(db, { tasks: claimed, leaseGraceSeconds: benchConfig.leaseGraceSeconds });
      const t1 = performance.now();
      const { finished } = await finishIfRunning(db, {
        results: claimed.map((c) => ({ id: c.id, epoch: c.epoch, outcome: 'succeeded' as const, error: null, retryDelayMs: null })),
      });
      const t2 = performance.now();
      if (started.length !== batch || finished.length !== batch) throw new Error(`fenced: started ${started.length}, finished ${finished.length}`);
      starts.push(t1 - t0);
      finishes.push(t2 - t1);
      totals.push(t2 - t0);
    }
    const n = await countTasks(url, `status = 'running'`);
    if (n !== running) throw new Error(`fenced: ${n} running, expected ${running}`);
    return { running, rounds, startMs: percentile(starts, 50), finishMs: percentile(finishes, 50), totalMs: percentile(totals, 50) };
  } finally {
    await db.close();
  }
}
