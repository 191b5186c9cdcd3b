// The plans of the fenced batch writes on a pooled connection (issue 12).
// After five runs of a named statement, Postgres plans it once for any
// parameters (a generic plan). With the batch from unnest, that plan joined
// the batch to its task rows by a nested loop that rescanned the batch for
// every row: 9,900 comparisons per 100 tasks, most of the fenced start's and
// finish's cost in the drain. These tests read the generic plans as run
// (EXPLAIN ANALYZE, rolled back): each scan of the batch runs once, and no
// scan of `tasks` reads more rows than the batch names, with more tasks
// running than the batch and statistics taken before any ran (what made a
// join without the ids read tasks_running_idx whole). The sweep's probe is
// read the same way, custom and generic, over statistics that no longer
// describe the table.
import { randomUUID } from 'node:crypto';
import { beforeAll, describe, expect, it } from 'vitest';
import type { Db, Queryable } from '../../src/db/seam.ts';
import { probeDueWork } from '../../src/db/sql/dispatchers.ts';
import { promoteDueTasks, purgeFinishedTasks, purgeSpentKeys, reapExpiredLeases } from '../../src/db/sql/tasks-maintenance.ts';
import { claimTasks, markDispatched, wakeParkedTasks } from '../../src/db/sql/tasks-dispatch.ts';
import { finishIfRunning, startIfClaimed } from '../../src/db/sql/tasks-fence.ts';
import { queueStats } from '../../src/db/sql/tenants.ts';
import { cancelPendingOccurrences, lockDueSchedules, pauseScheduleWithdrawOccurrences } from '../../src/db/sql/schedules.ts';
import { lockIdleSlots, purgeIdleFlowControl } from '../../src/db/sql/concurrency.ts';
import { finishedPerMinute, readMetricsSnapshot } from '../../src/db/sql/stats.ts';
import { listTasks } from '../../src/db/sql/tasks-read.ts';
import { cancelMatchingTasks } from '../../src/db/sql/bulkCancel.ts';
import { useTestDatabase, resetTables, T0, at } from '../helpers/db.ts';
import { createHarness } from '../helpers/harness.ts';
import { explainAsRun, expectReadsAtMost, rowsRead, type PlanNode } from '../helpers/plans.ts';

const t = useTestDatabase();

/** The nodes of `write`'s one statement as run, generic unless said (helpers/plans.ts). */
const planOf = async (write: (q: Queryable) => Promise<unknown>, plan: 'generic' | 'custom' = 'generic'): Promise<PlanNode[]> =>
  (await explainAsRun(t.db, write, plan)).nodes;

/** The nodes of `write`'s plan that read or write `tasks`. */
const tasksScans = async (write: (q: Queryable) => Promise<unknown>, plan: 'generic' | 'custom') =>
  (await planOf(write, plan)).filter((n) => n['Relation Name'] === 'tasks');

const BATCH = 100;
const RUNNING = 300;
let batch: { id: string; epoch: number }[] = [];

beforeAll(async () => {
  // These tests read plans over statistics they took on purpose: an
  // autoanalyze in between (a long, busy run) would replace them.
  await t.db.query('alter table tasks set (autovacuum_enabled = false)');
  await resetTables(t.db);
  const h = createHarness(t.db);
  await h.enqueue(Array.from({ length: RUNNING }, () => ({ task: 'noop' })), { now: T0 });
  // Statistics from before any task ran: the planner then takes the running
  // tasks for none.
  await t.db.query('analyze tasks');
  await h.sweep({ now: T0 });
  const bodies = h.outbox.take().map((m) => m.body);
  expect(bodies).toHaveLength(RUNNING);
  batch = bodies.slice(0, BATCH).map((b) => ({ id: b.id, epoch: b.epoch }));
});

/**
 * The scans of the batch's own rows (CTEs `batchCtes`, the first the batch
 * itself) run once, and those of tasks read at most the batch.
 */
function expectLinear(nodes: PlanNode[], ...batchCtes: string[]) {
  expect(nodes.length).toBeGreaterThan(10);
  for (const cte of batchCtes) {
    const scans = nodes.filter((n) => n['CTE Name'] === cte);
    expect(scans.some((n) => n['Actual Rows'] > 0), `${cte} read`).toBe(true);
    for (const n of scans) expect(n['Actual Loops'], `${cte} rescanned`).toBeLessThanOrEqual(1);
  }
  for (const n of nodes.filter((n) => n['Relation Name'] === 'tasks')) {
    expect(n['Actual Rows'] * n['Actual Loops'], `${n['Node Type']} on ${n['Index Name'] ?? 'tasks'}`).toBeLessThanOrEqual(BATCH);
  }
}

/**
 * paused_asked_once (tasks-fence.ts): with no queue paused, the per-task
 * reads of a task's queue are in the plan and never run.
 */
function expectNoQueueReadPerTask(nodes: PlanNode[]) {
  const perTask = nodes.filter((n) => n['Index Name'] === 'queues_pkey');
  expect(perTask.length, 'the per-task reads of the queue').toBeGreaterThan(0);
  expect(perTask.map((n) => n['Actual Loops']), 'per-task reads of the queue run').toEqual(perTask.map(() => 0));
}

describe('generic plans of the fenced batch writes', () => {
  it('the fenced start joins its batch by hashing and reads only its tasks', async () => {
    const nodes = await planOf((q) => startIfClaimed(q, { now: at(1), tasks: batch, leaseGraceSeconds: 30 }));
    expectLinear(nodes, 'msg');
  });

  it('the fenced start reads no queue per task unless a queue is paused', async () => {
    for (const plan of ['generic', 'custom'] as const) {
      expectNoQueueReadPerTask(await planOf((q) => startIfClaimed(q, { now: at(1), tasks: batch, leaseGraceSeconds: 30 }), plan));
    }
    // Another queue paused: each task's own queue is read (and the batch's, not paused, still starts).
    await t.db.query(`insert into queues (name, paused) values ('elsewhere', true)`);
    try {
      const nodes = await planOf((q) => startIfClaimed(q, { now: at(1), tasks: batch, leaseGraceSeconds: 30 }), 'custom');
      const perTask = nodes.filter((n) => n['Index Name'] === 'queues_pkey');
      expect(perTask.some((n) => n['Actual Loops'] > 0), 'per-task reads of the queue with one paused').toBe(true);
      const started = nodes.find((n) => n['Node Type'] === 'ModifyTable' && n['Actual Rows'] === BATCH);
      expect(started, 'the batch started').toBeDefined();
    } finally {
      await t.db.query(`delete from queues where name = 'elsewhere'`);
    }
  });

  it('the fenced finish joins its batch by hashing and reads only its tasks', async () => {
    const { started } = await startIfClaimed(t.db, { now: at(1), tasks: batch, leaseGraceSeconds: 30 });
    expect(started).toHaveLength(BATCH);
    const results = batch.map((b) => ({ ...b, outcome: 'succeeded' as const, error: null, retryDelayMs: null }));
    const nodes = await planOf((q) => finishIfRunning(q, { now: at(2), results }));
    expectLinear(nodes, 'res');
    // read_once_but_failures (tasks-fence.ts): successes read each task once.
    const reads = nodes.filter((n) => n['Relation Name'] === 'tasks' && n['Node Type'].endsWith('Scan'));
    expect(reads.reduce((sum, n) => sum + n['Actual Rows'] * n['Actual Loops'], 0), 'task rows read').toBe(BATCH);
  });

  // mark_reads_its_ids (tasks-dispatch.ts): planned for its values, the
  // mark's read of its batch hashed the whole table.
  it('the dispatch mark reads only its batch\'s tasks, planned for its values or not', async () => {
    for (const plan of ['generic', 'custom'] as const) {
      const nodes = await planOf((q) => markDispatched(q, { now: at(1), claimTokens: [randomUUID()], tasks: batch }), plan);
      const scans = nodes.filter((n) => n['Relation Name'] === 'tasks');
      expect(scans.length, `${plan}: the read of the batch`).toBeGreaterThan(0);
      for (const n of scans) {
        expect(n['Actual Rows'] * n['Actual Loops'], `${plan}: ${n['Node Type']} on ${n['Index Name'] ?? 'tasks'}`).toBeLessThanOrEqual(BATCH);
      }
    }
    expect(await markDispatched(t.db, { now: at(1), claimTokens: [randomUUID()], tasks: batch })).toEqual([]);
  });

  it("a rate-limited batch's start reads its places once, whatever the batch's size", async () => {
    const h = createHarness(t.db);
    const rateLimit = { key: 'partner', limit: 10_000, periodSeconds: 1 };
    await h.enqueue(Array.from({ length: BATCH }, () => ({ task: 'noop', rateLimit })), { now: at(10) });
    await h.sweep({ now: at(10) });
    const rated = h.outbox.take().map((m) => ({ id: m.body.id, epoch: m.body.epoch, rated: m.body.rated }));
    expect(rated.every((m) => m.rated)).toBe(true);
    expect(rated).toHaveLength(BATCH);
    const nodes = await planOf((q) => startIfClaimed(q, { now: at(11), tasks: rated, leaseGraceSeconds: 30 }));
    // One key: its line is read once, and each of its starts once.
    expectLinear(nodes, 'msg', 'rate_tasks', 'rate_decided', 'places');
    expectNoQueueReadPerTask(nodes);
    // started_now_skips_rate_tasks: its tasks are read twice (rate_tasks
    // and the starts on the line), not a third time for the unrated starts.
    const scans = nodes.filter((n) => n['Relation Name'] === 'tasks' && n['Node Type'] !== 'ModifyTable');
    expect(scans.reduce((sum, n) => sum + rowsRead(n), 0), 'task rows read').toBe(2 * BATCH);
    const { started } = await startIfClaimed(t.db, { now: at(11), tasks: rated, leaseGraceSeconds: 30 });
    expect(started).toHaveLength(BATCH);
  });
});

// probe_reads_the_index (src/db/sql/dispatchers.ts): the probe's arms over
// `tasks`, with statistics taken over a backlog the sweep has since claimed.
// As `exists`, the planner read the table whole for the first queued or due
// row (it expected the backlog, so a seq scan's first row looked cheap).
describe("the sweep's probe over statistics of a claimed backlog", () => {
  const BACKLOG = 2_000;
  const probe = (q: Queryable, now: Date) =>
    probeDueWork(q, { now, lookaheadSeconds: 60, retentionSeconds: 7 * 86_400, markRetentionSeconds: 3_600, spentKeyRetentionSeconds: 0 });

  async function expectIndexOnly(now: Date) {
    for (const plan of ['generic', 'custom'] as const) {
      const nodes = await planOf((q) => probe(q, now), plan);
      const scans = nodes.filter((n) => n['Relation Name'] === 'tasks');
      expect(scans.length, `${plan}: the arms over tasks`).toBeGreaterThanOrEqual(4);
      for (const n of scans) expect(n['Node Type'], `${plan}: ${n['Index Name'] ?? 'tasks'}`).not.toBe('Seq Scan');
      // Each arm's first row is its index's first: none but the reap arm
      // (every running task, probe_reap_last) reads more than one row.
      expectReadsAtMost(scans.filter((n) => n['Index Name'] !== 'tasks_running_idx'), 1, plan);
    }
  }

  async function claimAll(h: ReturnType<typeof createHarness>, now: Date) {
    // The whole backlog in one sweep, whatever its time budget.
    await h.sweep({ now, elapsed: () => 0 });
    expect(h.outbox.take()).toHaveLength(BACKLOG);
  }

  it('finds the one queued task behind a claimed backlog from the runnable index', async () => {
    await resetTables(t.db);
    const h = createHarness(t.db);
    await h.enqueue(Array.from({ length: BACKLOG }, () => ({ task: 'noop' })), { now: T0 });
    await t.db.query('analyze tasks');
    await claimAll(h, T0);
    await h.enqueue({ task: 'noop' }, { now: at(1) });
    expect(await probe(t.db, at(2))).toBe(true);
    await expectIndexOnly(at(2));
  });

  it('finds no due scheduled task once a promoted backlog is claimed, from the due index', async () => {
    await resetTables(t.db);
    const h = createHarness(t.db);
    await h.enqueue(Array.from({ length: BACKLOG }, () => ({ task: 'noop', runAt: at(600) })), { now: T0 });
    await t.db.query('analyze tasks');
    await claimAll(h, at(600));
    await h.enqueue({ task: 'noop', runAt: at(3_600) }, { now: at(601) });
    expect(await probe(t.db, at(602))).toBe(false);
    await expectIndexOnly(at(602));
  });

  // probe_parked_in_index_order: with every queued task parked behind a full
  // key, the parked arm answers. Ordered other than its index, it read and
  // sorted the whole parked backlog on every sweep.
  it("finds a saturated key's parked backlog from the parked index's first row", async () => {
    await resetTables(t.db);
    await t.db.query(`insert into concurrency_slots (tenant, key, max_running, running) values ('acme', 'busy', 1, 1)`);
    await t.db.query(
      `insert into tasks (tenant, task, status, run_at, vtime, parked, priority, concurrency_key, concurrency_limit)
       select 'acme', 'noop', 'queued', $1::timestamptz, i, true, i % 3 - 1, 'busy', 1 from generate_series(1, $2::int) i`,
      [T0, BACKLOG],
    );
    await t.db.query('analyze tasks');
    expect(await probe(t.db, at(1))).toBe(true);
    await expectIndexOnly(at(1));
  });

  // probe_reap_last: the leases have no index, so the reap arm reads every
  // running task; with work queued the probe answers before it.
  it('answers from the queued work without reading the running tasks', async () => {
    await resetTables(t.db);
    const h = createHarness(t.db);
    await h.enqueue(Array.from({ length: BACKLOG }, () => ({ task: 'noop' })), { now: T0 });
    await claimAll(h, T0);
    await h.enqueue({ task: 'noop' }, { now: at(1) });
    for (const plan of ['generic', 'custom'] as const) {
      const nodes = await planOf((q) => probe(q, at(2)), plan);
      const running = nodes.filter((n) => n['Index Name'] === 'tasks_running_idx');
      expect(running, `${plan}: the reap arm`).toHaveLength(1);
      expect(running[0]!['Actual Loops'], `${plan}: the reap arm ran`).toBe(0);
      const runnable = nodes.filter((n) => n['Index Name'] === 'tasks_runnable_idx');
      expect(runnable.map((n) => n['Actual Loops']), `${plan}: the dispatch arm`).toEqual([1]);
    }
    // With nothing queued or due, the reap arm is what is left to ask.
    await h.sweep({ now: at(2), elapsed: () => 0 });
    h.outbox.take();
    const nodes = await planOf((q) => probe(q, at(3)));
    expect(nodes.find((n) => n['Index Name'] === 'tasks_running_idx')?.['Actual Loops']).toBe(1);
  });

  // promote_bound_in_index (tasks-maintenance.ts): any sweep with work runs
  // the promote, and tasks scheduled far ahead must not cost it a read each.
  it('promotes from the due index up to the look-ahead, reading none of a backlog scheduled beyond it', async () => {
    await resetTables(t.db);
    const h = createHarness(t.db);
    // Statistics over a finished history, from before the backlog was
    // scheduled (as between two autoanalyzes): joined with the clock, the due
    // index was read whole.
    await h.enqueue(Array.from({ length: BACKLOG }, () => ({ task: 'noop' })), { now: T0 });
    await h.drain({ now: T0 });
    await t.db.query('analyze tasks');
    await h.enqueue(Array.from({ length: BACKLOG }, () => ({ task: 'noop', runAt: at(86_400) })), { now: T0 });
    await h.enqueue({ task: 'noop', runAt: at(120) }, { now: T0 });
    for (const plan of ['generic', 'custom'] as const) {
      const scans = (await planOf((q) => promoteDueTasks(q, { now: at(90), lookaheadSeconds: 60, limit: 500 }), plan)).filter(
        (n) => n['Relation Name'] === 'tasks',
      );
      // The due index gives the one due task and stops at the bound.
      const due = scans.filter((n) => n['Index Name'] === 'tasks_due_order_idx');
      expect(due.map((n) => n['Actual Rows']), `${plan}: the due task`).toEqual([1]);
      expectReadsAtMost(due, 1, plan);
    }
    expect(await promoteDueTasks(t.db, { now: at(90), lookaheadSeconds: 60, limit: 500 })).toBe(1);
  });

  // retention_by_age (migration 0027): the probe's purge arm and the purge
  // read the terminal tasks by finished_at. Over statistics taken before any
  // task finished, both partial indexes of terminal tasks looked empty, and
  // the planner walked a history within its retention by the tenant index
  // (then sorted it) to learn that nothing was old enough: every probe of
  // the drain's tail read the whole history.
  it('finds no history past its retention from the retention index, over statistics of a queued backlog', async () => {
    await resetTables(t.db);
    const h = createHarness(t.db);
    await h.enqueue(Array.from({ length: BACKLOG }, () => ({ task: 'noop' })), { now: T0 });
    await t.db.query('analyze tasks');
    await h.drain({ now: at(1) });
    const [{ n } = { n: 0 }] = await t.db.query<{ n: number }>(`select count(*)::int as n from tasks where status = 'succeeded'`);
    expect(n).toBe(BACKLOG);
    expect(await probe(t.db, at(2))).toBe(false);
    for (const plan of ['generic', 'custom'] as const) {
      const reads = [
        ...(await planOf((q) => probe(q, at(2)), plan)),
        ...(await planOf((q) => purgeFinishedTasks(q, { now: at(2), retentionSeconds: 7 * 86_400, limit: 500, markRetentionSeconds: 3_600 }), plan)),
      ].filter((n) => n['Relation Name'] === 'tasks');
      expect(reads.filter((n) => n['Index Name'] === 'tasks_finished_idx'), `${plan}: by the retention index`).toHaveLength(2);
      expectReadsAtMost(reads, 1, plan);
    }
  });
});

// window_bound_in_index (stats.ts): what the dashboard and /metrics read of
// the finished tasks is a window of the retention index on finished_at, not
// the history. Over statistics of a day-old history, the charts' window
// joined with the clock was a filter, and the planner read the table whole.
describe("the dashboard's and /metrics' windows over a day of history", () => {
  it('read only the tasks finished in the window, generic and custom', async () => {
    await resetTables(t.db);
    const h = createHarness(t.db);
    await h.enqueue(Array.from({ length: 2_000 }, () => ({ task: 'noop' })), { now: T0 });
    await h.drain({ now: T0 });
    await t.db.query('analyze tasks');
    await h.enqueue(Array.from({ length: 10 }, () => ({ task: 'noop' })), { now: at(86_000) });
    await h.drain({ now: at(86_000) });
    const now = at(86_100);
    for (const plan of ['generic', 'custom'] as const) {
      const reads = {
        charts: await planOf((q) => finishedPerMinute(q, { now, tenant: 'acme', minutes: 60 }), plan),
        counts: await planOf((q) => queueStats(q, { now, tenant: 'acme', finishedWindowSeconds: 3_600 }), plan),
        metrics: await planOf((q) => readMetricsSnapshot(q, { now, tenant: null, windowSeconds: 3_600, maxTenants: 10 }), plan),
      };
      for (const [read, nodes] of Object.entries(reads)) {
        const scans = nodes.filter((n) => n['Relation Name'] === 'tasks');
        expect(scans.map((n) => n['Index Name']), `${plan} ${read}: the window by the retention index`).toContain('tasks_finished_idx');
        expectReadsAtMost(scans, 10, `${plan} ${read}`);
      }
    }
    expect((await finishedPerMinute(t.db, { now, tenant: 'acme', minutes: 60 })).map((m) => m.finished)).toEqual([{ succeeded: 10 }]);
  });

  // counts_window_bound_in_index (tenants.ts): with other tenants in the
  // history, a tenant's name is selective, and with the window a filter
  // joined with the clock, the generic plan (a pooled connection's after
  // five runs) read the tenant's whole history by its index: 324 ms at
  // 300,000 finished tasks of one tenant (PostgreSQL 15).
  it("the queue counts read only the window beside other tenants' history, generic and custom", async () => {
    // 30 % of a history of 100,000 is the tenant's; the rest, 49 others.
    const HISTORY = 100_000;
    await resetTables(t.db);
    const h = createHarness(t.db);
    await t.db.query(
      `insert into tasks (tenant, task, status, run_at, finished_at)
       select case when i % 10 < 3 then 'acme' else 'tenant-' || i % 50 end, 'noop', 'succeeded', $1::timestamptz,
              $1::timestamptz - (i % 86400) * interval '1 second'
       from generate_series(1, $2::int) i`,
      [T0, HISTORY],
    );
    await t.db.query('analyze tasks');
    await h.enqueue(Array.from({ length: 10 }, () => ({ task: 'noop' })), { now: at(86_000) });
    await h.drain({ now: at(86_000) });
    const now = at(86_100);
    for (const plan of ['generic', 'custom'] as const) {
      const nodes = await planOf((q) => queueStats(q, { now, tenant: 'acme', finishedWindowSeconds: 3_600 }), plan);
      expectReadsAtMost(
        nodes.filter((n) => n['Relation Name'] === 'tasks'),
        10,
        `${plan}: the queue counts`,
      );
    }
    const [acme] = await queueStats(t.db, { now, tenant: 'acme', finishedWindowSeconds: 3_600 });
    expect(acme!.counts.succeeded).toBe(10);
  });
});

/**
 * `schedules` every-minute schedules of acme (every-minute-1, ...; overlap
 * skip, next due a day after T0) in emptied tables, each with `minutes`
 * finished occurrences, one a minute from T0.
 */
async function schedulesWithHistory(schedules: number, minutes: number) {
  await resetTables(t.db);
  await t.db.query(`delete from schedules`);
  await t.db.query(
    `insert into schedules (tenant, name, kind, interval_seconds, timezone, task, payload, queue, max_attempts, options,
                            misfire, misfire_grace_seconds, catch_up_limit, overlap, enabled, next_run_at)
     select 'acme', 'every-minute-' || i, 'interval', 60, 'UTC', 'noop', '{}', 'default', 5, '{}', 'run_once', 60, 10,
            'skip', true, $1::timestamptz
     from generate_series(1, $2::int) i`,
    [at(86_400), schedules],
  );
  await t.db.query(
    `insert into tasks (tenant, task, status, run_at, finished_at, schedule_id, scheduled_for)
     select 'acme', 'noop', 'succeeded', o.at, o.at, s.id, o.at
     from schedules s, lateral (select $1::timestamptz + i * interval '1 minute' as at from generate_series(0, $2::int - 1) i) o`,
    [T0, minutes],
  );
}

// busy_from_live_occurrences (schedules.ts, migration 0028): whether a due
// schedule's last run is still live is read from its live occurrences, never
// from its history (the only other index by schedule holds every occurrence).
describe("the materialization's busy check beside a long history of occurrences", () => {
  it("reads only the schedules' live occurrences, generic and custom", async () => {
    // Finished occurrences for each, and a live one for the first.
    await schedulesWithHistory(10, 200);
    await t.db.query(
      `insert into tasks (tenant, task, status, run_at, schedule_id, scheduled_for)
       select 'acme', 'noop', 'scheduled', $1::timestamptz, min(id), $1::timestamptz from schedules`,
      [at(86_460)],
    );
    await t.db.query('analyze tasks');
    for (const plan of ['generic', 'custom'] as const) {
      const nodes = await planOf((q) => lockDueSchedules(q, { now: at(86_400), lookaheadSeconds: 60, limit: 100 }), plan);
      const scans = nodes.filter((n) => n['Relation Name'] === 'tasks');
      expect(scans.map((n) => n['Index Name']), `${plan}: by the live occurrences`).toEqual(['tasks_live_occurrences_idx']);
      expectReadsAtMost(scans, 1, plan);
    }
    const due = await lockDueSchedules(t.db, { now: at(86_400), lookaheadSeconds: 60, limit: 100 });
    expect(due.map((d) => d.busy).sort()).toEqual([...Array.from({ length: 9 }, () => false), true]);
  });
});

// occurrences_by_live_index (schedules.ts): a schedule's pause and its
// delete read its not-started occurrences from the live occurrences' index;
// by the occurrence key they read the schedule's whole history.
describe("a schedule's pause and delete beside its long history", () => {
  it('read only its live occurrences, generic and custom, and withdraw or cancel them', async () => {
    // A day of finished occurrences, then one due and one planned ahead,
    // beside a backlog of other work waiting (what makes the status indexes
    // look dearer than the occurrence key).
    await schedulesWithHistory(1, 1_439);
    await t.db.query(
      `insert into tasks (tenant, task, status, run_at, vtime)
       select 'beta', 'noop', 'queued', $1::timestamptz, i from generate_series(1, 5000) i`,
      [T0],
    );
    await t.db.query(
      `insert into tasks (tenant, task, status, run_at, schedule_id, scheduled_for)
       select 'acme', 'noop', 'scheduled', o.at, s.id, o.at
       from schedules s, (values ($1::timestamptz), ($2::timestamptz)) o(at)`,
      [at(86_340), at(86_460)],
    );
    await t.db.query('analyze tasks');
    const now = at(86_400);
    for (const plan of ['generic', 'custom'] as const) {
      for (const [name, write] of [
        ['pause', (q: Queryable) => pauseScheduleWithdrawOccurrences(q, { now, tenant: 'acme', name: 'every-minute-1' })],
        ['delete', (q: Queryable) => cancelPendingOccurrences(q, { now, tenant: 'acme', name: 'every-minute-1' })],
      ] as const) {
        const scans = (await planOf(write, plan)).filter((n) => n['Relation Name'] === 'tasks' && n['Index Name'] !== 'tasks_pkey');
        expect(scans.length, `${plan} ${name}: the reads of occurrences`).toBeGreaterThan(0);
        expectReadsAtMost(scans, 2, `${plan} ${name}`);
      }
    }
    expect(await pauseScheduleWithdrawOccurrences(t.db, { now, tenant: 'acme', name: 'every-minute-1' })).toMatchObject({ withdrawn: 1, cancelled: 1 });
  });
});

// idle_slots_from_candidates (concurrency.ts): the purge of idle keys asks
// only about the keys whose tasks the sweep just deleted, not about every
// key (one per user, say) each busy sweep.
describe('the purge of idle concurrency keys beside many keys in use', () => {
  it("reads only the candidates' slot rows and tasks, generic and custom", async () => {
    await resetTables(t.db);
    await t.db.query(
      `insert into concurrency_slots (tenant, key, max_running) select 'acme', 'user-' || i, 1 from generate_series(1, 2000) i`,
    );
    // Every key but user-1 keeps a waiting task.
    await t.db.query(
      `insert into tasks (tenant, task, status, run_at, concurrency_key, concurrency_limit)
       select 'acme', 'noop', 'scheduled', $1::timestamptz + interval '1 day', 'user-' || i, 1 from generate_series(2, 2000) i`,
      [T0],
    );
    await t.db.query('analyze tasks');
    await t.db.query('analyze concurrency_slots');
    const keys = ['user-1', 'user-2'].map((key) => ({ tenant: 'acme', key }));
    for (const plan of ['generic', 'custom'] as const) {
      const nodes = await planOf((q) => lockIdleSlots(q, { limit: 500, keys }), plan);
      const scans = nodes.filter((n) => n['Relation Name'] === 'tasks' || n['Relation Name'] === 'concurrency_slots');
      expect(scans.length, `${plan}: the scans`).toBeGreaterThanOrEqual(2);
      expectReadsAtMost(scans, 2, plan);
    }
    expect(await lockIdleSlots(t.db, { limit: 500, keys })).toEqual([{ tenant: 'acme', key: 'user-1' }]);
  });
});

// purge_by_ids (tasks-maintenance.ts): the purge deletes a batch of tasks,
// their attempts and old dispatch marks beside far more of each it keeps;
// a generic plan (planned for a batch of any size) must not read the kept.
describe('the purge of a few old tasks beside a long history of attempts and marks', () => {
  it('reads only the rows it deletes, generic and custom', async () => {
    await resetTables(t.db);
    await t.db.query('truncate dispatch_marks');
    const RETENTION = 7 * 86_400;
    await t.db.query(
      `with finished as (
         insert into tasks (tenant, task, status, run_at, finished_at, attempts)
         select 'acme', 'noop', 'succeeded', f.at, f.at, 1
         from generate_series(1, 2003) i,
              lateral (select case when i <= 3 then $1::timestamptz - interval '8 days' else $1::timestamptz end as at) f
         returning id, finished_at)
       , attempts as (
         insert into task_attempts (task_id, attempt, epoch, outcome, started_at, finished_at)
         select id, 1, 1, 'succeeded', finished_at, finished_at from finished)
       insert into dispatch_marks (claim_token, dispatched_at) select gen_random_uuid(), finished_at from finished`,
      [T0],
    );
    for (const table of ['tasks', 'task_attempts', 'dispatch_marks']) await t.db.query(`analyze ${table}`);
    const purge = (q: Queryable) => purgeFinishedTasks(q, { now: T0, retentionSeconds: RETENTION, limit: 500, markRetentionSeconds: 3_600 });
    for (const plan of ['generic', 'custom'] as const) {
      const scans = (await planOf(purge, plan)).filter((n) => ['tasks', 'task_attempts', 'dispatch_marks'].includes(n['Relation Name'] ?? ''));
      expect(scans.length, `${plan}: the scans`).toBeGreaterThanOrEqual(4);
      expectReadsAtMost(scans, 3, plan);
    }
    expect((await purgeFinishedTasks(t.db, { now: T0, retentionSeconds: RETENTION, limit: 500, markRetentionSeconds: 3_600 })).purged).toBe(3);
    expect(
      await t.db.query(`select (select count(*)::int from task_attempts) as attempts, (select count(*)::int from dispatch_marks) as marks`),
    ).toEqual([{ attempts: 2_000, marks: 2_000 }]);
  });
});

// wake_skips_parked_keys (tasks-dispatch.ts): the sweep's safety net of the
// wake-ups runs every sweep with work; a saturated key's parked backlog must
// not cost it a read per task.
// claim_skips_full_keys (tasks-dispatch.ts): the claim asks about a task's
// key by the slot row's primary key. Asked as a set of every full key, the
// claim's estimate grew with the keys in use, past jit_above_cost (3.3 s of
// JIT compilation for a claim of 500 plain tasks beside 200,000 keys): each
// slot row's probe of its frees is priced as an index read.
describe('the claim beside many concurrency keys in use', () => {
  it('costs less than JIT compilation starts at, generic and custom, and passes over the full key', async () => {
    await resetTables(t.db);
    await t.db.query(
      `insert into concurrency_slots (tenant, key, max_running, running)
       select 'acme', 'user-' || i, 3, 1 from generate_series(1, 50000) i
       union all select 'acme', 'busy', 1, 1`,
    );
    await t.db.query(
      `insert into tasks (tenant, task, status, run_at, vtime, concurrency_key, concurrency_limit)
       select 'acme', 'noop', 'queued', $1::timestamptz, i, case when i <= 10 then 'busy' end, case when i <= 10 then 1 end
       from generate_series(1, 500) i`,
      [T0],
    );
    // Frees not yet folded into their slot rows, as finishes leave them: the
    // planner then prices a probe of them by their index, as in production.
    await t.db.query(`insert into concurrency_frees (tenant, key, n) select 'acme', 'user-' || i, 1 from generate_series(1, 1000) i`);
    await t.db.query('analyze tasks, concurrency_slots, concurrency_frees');
    const [jit] = await t.db.query<{ cost: number }>(`select current_setting('jit_above_cost')::float8 as cost`);
    // Both claim statements; a batch with keys is claimed by the whole one.
    for (const plan of ['generic', 'custom'] as const) {
      for (const flow of [false, true]) {
        const nodes = await planOf((q) => claimTasks(q, { now: T0, queue: 'default', limit: 500, claimedBy: 'plans', leaseSeconds: 60, flow }), plan);
        expect(nodes[0]!['Total Cost'], `${plan}, flow ${flow}: the claim's estimated cost`).toBeLessThan(jit!.cost);
      }
    }
    const claim = await claimTasks(t.db, { now: T0, queue: 'default', limit: 500, claimedBy: 'plans', leaseSeconds: 60 });
    expect(claim.claimed).toHaveLength(490);
  });
});

// claim_priority_scan_in_order (tasks-dispatch.ts): the claim's priority
// scan (best_locked) reads a tenant's runnable tasks in the order of
// tasks_runnable_priority_idx, and no more of them than the batch. Limited by
// the tenant's share alone (not a constant), it was planned as if it read a
// tenth of the tenant's queued tasks, and beside a long history that made a
// bitmap over every one of them, sorted, look cheaper: 132 of a claim's
// 149 ms beside 1,000,000 finished rows and 20,000 queued (BENCHMARKS.md).
// The flow filter is charged per task for its probe of concurrency_slots:
// here 10,000 keys are in use, analyzed. (Against that table never analyzed,
// planned as ten pages, the mutant of this guard lost or won by the sample
// of the statistics, and survived a CI run.)
describe("the claim's priority scan beside a long history", () => {
  it('reads the first of the tenant\'s runnable tasks in order, not all of them', async () => {
    await resetTables(t.db);
    await t.db.query(
      `insert into tasks (tenant, queue, task, payload, status, run_at, created_at, updated_at, dispatched_at,
                          started_at, finished_at, attempts, vtime, claimed_by, lease_epoch)
       select 'acme', 'default', 'noop', '{}'::jsonb, 'succeeded', x.t, x.t, x.t, x.t, x.t, x.t, 1, g, 'seed', 1
       from generate_series(1, 300000) g, lateral (select $1::timestamptz - interval '1 day' + g * interval '1 ms') as x(t)`,
      [T0],
    );
    // Two tenants' backlogs, interleaved: each scan of a tenant's share
    // reads that share, not the batch (summed over its loops, at most 500).
    await t.db.query(
      `insert into tasks (tenant, task, status, run_at, vtime)
       select case when i % 2 = 0 then 'acme' else 'beta' end, 'noop', 'queued', $1::timestamptz, 300000 + i
       from generate_series(1, 20000) i`,
      [T0],
    );
    await t.db.query(`insert into concurrency_slots (tenant, key, max_running, running) select 'acme', 'k' || i, 10, i % 10 from generate_series(1, 10000) i`);
    await t.db.query('analyze tasks, concurrency_slots, concurrency_frees');
    // Both claim statements: the plain one and the whole one (flow control).
    for (const flow of [false, true]) {
      const nodes = await planOf((q) => claimTasks(q, { now: T0, queue: 'default', limit: 500, claimedBy: 'plans', leaseSeconds: 60, flow }), 'custom');
      expectReadsAtMost(nodes.filter((n) => n['Relation Name'] === 'tasks'), 500, `custom, flow ${flow}`);
    }
    const claim = await claimTasks(t.db, { now: T0, queue: 'default', limit: 500, claimedBy: 'plans', leaseSeconds: 60 });
    expect(claim.claimed).toHaveLength(500);
  });
});

// updates_by_id (tasks-shared.ts) in the plain claim: its update names its
// rows by id. Joined to the batch alone, a plan for its values over a table
// of 20,000 queued tasks hashed all of them to write 500 (5 of a claim's
// 14 ms, BENCHMARKS.md, issue 12, seventeenth pass).
describe("the plain claim's write beside a backlog of queued tasks", () => {
  it('claims a plain batch reading only the batch, generic and custom', async () => {
    await resetTables(t.db);
    // 5,000: PostgreSQL 18 hashed it here (beside 20,000 it looked the ids
    // up); 15 hashed both.
    await t.db.query(
      `insert into tasks (tenant, task, status, run_at, vtime)
       select 'acme', 'noop', 'queued', $1::timestamptz, i from generate_series(1, 5000) i`,
      [T0],
    );
    await t.db.query('vacuum analyze tasks');
    const claim = (q: Queryable) => claimTasks(q, { now: T0, queue: 'default', limit: 500, claimedBy: 'plans', leaseSeconds: 60 });
    for (const plan of ['generic', 'custom'] as const) {
      expectReadsAtMost(await tasksScans(claim, plan), 500, plan);
    }
    expect((await claim(t.db)).claimed).toHaveLength(500);
  });
});

// updates_by_id (tasks-shared.ts) in the sweep's other writes and the bulk
// cancel, and the due index in the promote's order (migration 0035): each
// reads its batch, not the backlog beside it.
describe("the promote's, the reaper's and the bulk cancel's writes beside a backlog", () => {
  const BACKLOG = 20_000;

  it('promotes a batch of tasks due at one instant reading only the batch, generic and custom', async () => {
    await resetTables(t.db);
    await t.db.query(
      `insert into tasks (tenant, task, status, run_at) select 'acme', 'noop', 'scheduled', $1::timestamptz from generate_series(1, ${BACKLOG}) i`,
      [T0],
    );
    await t.db.query('vacuum analyze tasks');
    const promote = (q: Queryable) => promoteDueTasks(q, { now: at(1), lookaheadSeconds: 60, limit: 1000 });
    for (const plan of ['generic', 'custom'] as const) expectReadsAtMost(await tasksScans(promote, plan), 1000, plan);
    expect(await promote(t.db)).toBe(1000);
    // In id order: the lowest 1,000.
    const [promoted] = await t.db.query<{ max: string }>(`select max(id)::text as max from tasks where status = 'queued'`);
    expect(promoted!.max).toBe('1000');
  });

  it('reaps a batch of expired leases reading the running tasks once', async () => {
    await resetTables(t.db);
    await t.db.query(
      `insert into tasks (tenant, task, status, run_at, attempts, lease_epoch, claimed_by, lease_expires_at, started_at, dispatched_at)
       select 'acme', 'noop', 'running', x.t, 1, 1, 'gone', x.t + interval '50 minutes', x.t, x.t
       from generate_series(1, ${BACKLOG}) i, lateral (select $1::timestamptz - interval '1 hour' as t) x`,
      [T0],
    );
    await t.db.query('vacuum analyze tasks');
    const reap = (q: Queryable) => reapExpiredLeases(q, { now: T0, limit: 500, dispatchLeaseSeconds: 300 });
    for (const plan of ['generic', 'custom'] as const) {
      // No index orders the leases: the expiry's scan reads the running
      // tasks; the write reads only the batch it found.
      const wide = (await tasksScans(reap, plan)).filter((n) => rowsRead(n) > 500);
      expect(wide.length, `${plan}: scans of tasks reading more than the batch`).toBe(1);
    }
    expect((await reap(t.db)).retried).toBe(500);
  });

  // A bulk cancel is an HTTP request: a Worker's, planned for its values.
  // A generic plan picks a tenant's only backlog by a seq scan and a top-N
  // sort (it prices the unknown limit at a tenth of the rows), but its write
  // still looks each task up once.
  it("bulk-cancels a batch of a tenant's waiting tasks reading only the batch", async () => {
    await resetTables(t.db);
    await t.db.query(
      `insert into tasks (tenant, task, status, run_at, vtime) select 'acme', 'noop', 'queued', $1::timestamptz, i from generate_series(1, ${BACKLOG}) i`,
      [T0],
    );
    await t.db.query('vacuum analyze tasks');
    const cancel = (q: Queryable) => cancelMatchingTasks(q, { now: T0, tenant: 'acme', match: {}, limit: 1000 });
    expectReadsAtMost(await tasksScans(cancel, 'custom'), 1000, 'custom');
    for (const n of await tasksScans(cancel, 'generic')) {
      expect(n['Actual Loops'], `generic: ${n['Node Type']} on ${n['Index Name'] ?? 'tasks'} rescanned`).toBeLessThanOrEqual(1);
    }
    expect(await cancel(t.db)).toHaveLength(1000);
  });
});

describe("the sweep's wake of parked tasks beside a saturated key's parked backlog", () => {
  it('reads a row per key with parked tasks, generic and custom, and wakes only where there is room', async () => {
    await resetTables(t.db);
    await t.db.query(
      `insert into concurrency_slots (tenant, key, max_running, running)
       values ('acme', 'busy', 1, 1), ('acme', 'roomy', 2, 0), ('beta', 'busy', 1, 1)`,
    );
    await t.db.query(
      `insert into tasks (tenant, task, status, run_at, vtime, parked, concurrency_key, concurrency_limit)
       select k.tenant, 'noop', 'queued', $1::timestamptz, i, true, k.key, k.max_running
       from generate_series(1, 2000) i cross join concurrency_slots k where k.key = 'busy'
       union all
       select 'acme', 'noop', 'queued', $1::timestamptz, 3000, true, 'roomy', 2`,
      [T0],
    );
    await t.db.query('analyze tasks');
    await t.db.query('analyze concurrency_slots');
    for (const plan of ['generic', 'custom'] as const) {
      const nodes = await planOf((q) => wakeParkedTasks(q, { keys: 500 }), plan);
      const parked = nodes.filter((n) => n['Relation Name'] === 'tasks' && n['Index Name'] !== 'tasks_pkey');
      expect(parked.length, `${plan}: the reads of parked tasks`).toBeGreaterThan(0);
      // Three keys: at most a probe of each, and the one woken task.
      expect(parked.reduce((sum, n) => sum + rowsRead(n), 0), `${plan}: parked rows read`).toBeLessThanOrEqual(10);
    }
    expect(await wakeParkedTasks(t.db, { keys: 500 })).toBe(1);
    expect(await t.db.query(`select concurrency_key as key from tasks where not parked`)).toEqual([{ key: 'roomy' }]);
  });
});

// purge_reads_by_age (dispatchers.ts, concurrency.ts, tasks-maintenance.ts,
// migration 0029): the tables the purge keeps besides the history grow with
// use (a rate key per user, a spent key per idempotent task), and every
// probe, an idle tick's too, asks each whether anything in it is old enough.
// Without an index by age, the answer "nothing" read the table whole.
describe("the probe and the purge beside many spent keys, dispatch marks and rate lines in use", () => {
  const N = 2_000;
  const RETENTION = 7 * 86_400;
  const tables = ['spent_idempotency_keys', 'dispatch_marks', 'rate_limits', 'rate_start_lines'];
  const probe = (q: Queryable, now: Date) =>
    probeDueWork(q, { now, lookaheadSeconds: 60, retentionSeconds: RETENTION, markRetentionSeconds: 3_600, spentKeyRetentionSeconds: RETENTION });
  const purges = (db: Db, now: Date) =>
    Promise.all([
      purgeSpentKeys(db, { now, retentionSeconds: RETENTION, limit: 500 }),
      purgeIdleFlowControl(db, { now, retentionSeconds: RETENTION, limit: 500, keys: [] }),
    ]);
  /** `n` rows of each table, all of them written (or their lines standing) at `when`. */
  const fill = (from: number, n: number, when: Date) =>
    t.db.query(
      `with rows as (select i from generate_series($1::int, $1::int + $2::int - 1) i)
       , spent as (insert into spent_idempotency_keys (tenant, idempotency_key, task_id, status, spent_at)
                   select 'acme', 'k' || i, i, 'succeeded', $3::timestamptz from rows)
       , marks as (insert into dispatch_marks (claim_token, dispatched_at) select gen_random_uuid(), $3::timestamptz from rows)
       , claims as (insert into rate_limits (tenant, key, max_starts, period_seconds, next_claim_at)
                    select 'acme', 'user-' || i, 10, 60, $3::timestamptz from rows)
       insert into rate_start_lines (tenant, key, next_start_at) select 'acme', 'user-' || i, $3::timestamptz from rows`,
      [from, n, when],
    );
  const scansOf = (nodes: PlanNode[]) => nodes.filter((n) => tables.includes(n['Relation Name'] ?? ''));
  const inOneTransaction = (q: Queryable) => ({ transaction: (fn: (tx: Queryable) => unknown) => fn(q) }) as unknown as Db;

  it('read none of the rows within their retention, generic and custom, and purge only those past it', async () => {
    await resetTables(t.db);
    await t.db.query('truncate dispatch_marks');
    // Statistics of tables whose every row was old (as before a purge that
    // emptied them, between two autoanalyzes): the planner then expects the
    // first row it reads to be old enough, and reading in any order to be cheap.
    for (const table of tables) await t.db.query(`alter table ${table} set (autovacuum_enabled = false)`);
    await fill(1, N, at(-RETENTION - 60));
    for (const table of tables) await t.db.query(`analyze ${table}`);
    for (const table of tables) await t.db.query(`delete from ${table}`);
    await fill(1, N, T0);
    const now = at(60);
    expect(await probe(t.db, now)).toBe(false);
    for (const plan of ['generic', 'custom'] as const) {
      const probed = scansOf(await planOf((q) => probe(q, now), plan));
      expect(probed.map((n) => n['Relation Name']).sort(), `${plan}: the probe's arms`).toEqual([...tables].sort());
      expectReadsAtMost(probed, 1, `${plan}: the probe`);
      const purged = [
        ...scansOf(await planOf((q) => purgeSpentKeys(q, { now, retentionSeconds: RETENTION, limit: 500 }), plan)),
        // With no candidate keys, the flow-control purge is its one statement.
        ...scansOf(await planOf((q) => purgeIdleFlowControl(inOneTransaction(q), { now, retentionSeconds: RETENTION, limit: 500, keys: [] }), plan)),
      ];
      expect(new Set(purged.map((n) => n['Relation Name'])), `${plan}: the purges`).toEqual(new Set(['rate_limits', 'rate_start_lines', 'spent_idempotency_keys']));
      expectReadsAtMost(purged, 1, `${plan}: the purges`);
    }
    // Three of each past the retention: found, and purged alone, oldest first,
    // by their keys (purge_by_ids: a generic plan joined them to a seq scan).
    await fill(N + 1, 3, at(-RETENTION - 60));
    expect(await probe(t.db, now)).toBe(true);
    for (const plan of ['generic', 'custom'] as const) {
      const purged = [
        ...scansOf(await planOf((q) => purgeSpentKeys(q, { now, retentionSeconds: RETENTION, limit: 500 }), plan)),
        ...scansOf(await planOf((q) => purgeIdleFlowControl(inOneTransaction(q), { now, retentionSeconds: RETENTION, limit: 500, keys: [] }), plan)),
      ];
      expectReadsAtMost(purged, 3, `${plan}: the purges of three`);
    }
    expect(await purges(t.db, now)).toEqual([3, { slots: 0, rates: 3 }]);
    expect(await t.db.query(`select (select count(*)::int from spent_idempotency_keys) as spent, (select count(*)::int from rate_limits) as claims,
                                    (select count(*)::int from rate_start_lines) as starts`)).toEqual([{ spent: N, claims: N, starts: N }]);
  });
});

// The dashboard's counts (queues_stats_for_tenant, every 2 s per open page):
// a tenant's waiting tasks come from tasks_pending_tenant_idx, which holds no
// running task (migration 0025), and its running ones from tasks_running_idx.
// Asked for all three live statuses in one predicate, no partial index
// answers and the planner reads the tenant's whole history.
describe("the dashboard's queue counts over a tenant's finished history", () => {
  it("reads the tenant's waiting and running tasks by their partial indexes, not its history", async () => {
    await resetTables(t.db);
    const h = createHarness(t.db);
    // A history many pages long: over a few pages, reading the table whole is the cheaper plan.
    for (let i = 0; i < 3; i++) {
      await h.enqueue(Array.from({ length: 1_000 }, () => ({ task: 'noop' })), { now: T0 });
      await h.sweep({ now: T0, elapsed: () => 0 });
      await h.deliver(h.outbox.take(), { now: T0 });
    }
    await h.enqueue(Array.from({ length: 10 }, () => ({ task: 'noop' })), { now: at(7_200) });
    await h.sweep({ now: at(7_200), elapsed: () => 0 });
    expect(h.outbox.take()).toHaveLength(10);
    await h.enqueue(Array.from({ length: 20 }, () => ({ task: 'noop', runAt: at(86_400) })), { now: at(7_200) });
    await h.enqueue(Array.from({ length: 100 }, () => ({ task: 'noop' })), { now: at(7_200), tenant: 'other' });
    await t.db.query('analyze tasks');
    const stats = (q: Queryable) => queueStats(q, { now: at(7_201), tenant: 'acme', finishedWindowSeconds: 3_600 });
    for (const plan of ['generic', 'custom'] as const) {
      const scans = (await planOf(stats, plan)).filter((n) => n['Relation Name'] === 'tasks');
      expect(scans.length, `${plan}: the scans of tasks`).toBeGreaterThanOrEqual(3);
      expectReadsAtMost(scans, 20, plan);
    }
    // Claimed and not started shows as queued; the history is outside the hour.
    const [counts] = await stats(t.db);
    expect(counts!.counts).toMatchObject({ scheduled: 20, queued: 10, running: 0, succeeded: 0 });
  });
});

// The task list and the bulk cancel (migration 0026): a task has a tenant
// index entry while it waits and once it has finished, none while it runs.
// The list merges three arms newest first and the bulk cancel two oldest
// first; with few tenants (the generic plan takes each for a third of the
// table), an arm that walks the primary key instead of its tenant index
// reads another tenant's whole history before the small tenant's rows. The
// small tenant's finished tasks are older than that history and its waiting
// ones newer, so either direction has it to cross. Only the running arm may
// read other tenants' rows: the tasks in flight, whoever's they are.
describe("a small tenant's task list and bulk cancel beside a long history and many in flight", () => {
  const HISTORY = 3_000;
  const IN_FLIGHT = 300;
  const small: Record<string, string> = {};

  beforeAll(async () => {
    await resetTables(t.db);
    const h = createHarness(t.db);
    // Each step sweeps only what it enqueued: the steps before finished or started theirs.
    const swept = async (n: number, now: Date) => {
      await h.sweep({ now, elapsed: () => 0 });
      const sent = h.outbox.take();
      expect(sent).toHaveLength(n);
      return sent;
    };
    const start = async (sent: { body: { id: string; epoch: number } }[], now: Date) => {
      const { started } = await startIfClaimed(t.db, { now, tasks: sent.map((m) => ({ id: m.body.id, epoch: m.body.epoch })), leaseGraceSeconds: 30 });
      expect(started).toHaveLength(sent.length);
    };
    const idOf = async (...args: Parameters<typeof h.enqueue>) => (await h.enqueue(...args))[0]!.task!.id;
    const [a, b] = await h.enqueue([{ task: 'noop' }, { task: 'noop' }], { now: T0, tenant: 'small' });
    await h.deliver(await swept(2, T0), { now: T0 });
    [small.succeeded1, small.succeeded2] = [a!.task!.id, b!.task!.id];
    for (let i = 0; i < HISTORY / 1_000; i++) {
      await h.enqueue(Array.from({ length: 1_000 }, () => ({ task: 'noop' })), { now: at(1) });
      await h.deliver(await swept(1_000, at(1)), { now: at(1) });
    }
    await h.enqueue(Array.from({ length: IN_FLIGHT }, () => ({ task: 'noop' })), { now: at(2), tenant: 'hostile' });
    await start(await swept(IN_FLIGHT, at(2)), at(2));
    small.claimed = await idOf({ task: 'noop' }, { now: at(3), tenant: 'small' });
    await swept(1, at(3));
    small.running = await idOf({ task: 'noop' }, { now: at(4), tenant: 'small' });
    await start(await swept(1, at(4)), at(4));
    small.queued = await idOf({ task: 'noop' }, { now: at(5), tenant: 'small' });
    small.scheduled = await idOf({ task: 'noop', runAt: at(86_400) }, { now: at(5), tenant: 'small' });
    await t.db.query('analyze tasks');
  });

  /** No scan of tasks reads more than `rows`, but the running arm's, which reads at most the tasks in flight. */
  function expectBounded(nodes: PlanNode[], label: string, rows: number) {
    const scans = nodes.filter((n) => n['Relation Name'] === 'tasks');
    expect(scans.length, `${label}: the scans of tasks`).toBeGreaterThan(0);
    for (const n of scans) {
      const bound = n['Index Name'] === 'tasks_running_idx' ? IN_FLIGHT + 2 : rows;
      expect(rowsRead(n), `${label}: ${n['Node Type']} on ${n['Index Name'] ?? 'tasks'}`).toBeLessThanOrEqual(bound);
    }
  }

  it('lists newest first across waiting, running and finished tasks, reading only the tenant\'s rows and those in flight', async () => {
    const newestFirst = [small.scheduled, small.queued, small.running, small.claimed, small.succeeded2, small.succeeded1];
    const all = await listTasks(t.db, 'small', { limit: 10 });
    expect(all.map((x) => x.id)).toEqual(newestFirst);
    // The rows' own statuses; the API shows the task claimed early as queued, and the status filter matches that.
    expect(all.map((x) => x.status)).toEqual(['scheduled', 'queued', 'running', 'running', 'succeeded', 'succeeded']);
    const paged: string[] = [];
    for (let beforeId: string | undefined; ; ) {
      const page = await listTasks(t.db, 'small', { limit: 2, beforeId });
      expect(page.length).toBeLessThanOrEqual(2);
      paged.push(...page.map((x) => x.id));
      if (page.length < 2) break;
      beforeId = page.at(-1)!.id;
    }
    expect(paged).toEqual(newestFirst);
    expect((await listTasks(t.db, 'small', { limit: 10, statuses: ['queued'] })).map((x) => x.id)).toEqual([small.queued, small.claimed]);
    expect((await listTasks(t.db, 'small', { limit: 10, statuses: ['running', 'succeeded'] })).map((x) => x.id)).toEqual([
      small.running,
      small.succeeded2,
      small.succeeded1,
    ]);
    for (const plan of ['generic', 'custom'] as const) {
      expectBounded(await planOf((q) => listTasks(q, 'small', { limit: 2 }), plan), `${plan}, first page`, 4);
      expectBounded(await planOf((q) => listTasks(q, 'small', { limit: 10 }), plan), `${plan}, whole list`, 4);
      expectBounded(await planOf((q) => listTasks(q, 'small', { limit: 10, statuses: ['succeeded'] }), plan), `${plan}, finished`, 4);
      // A status filter no finished task can match reads none of the tenant's history.
      expectBounded(await planOf((q) => listTasks(q, 'acme', { limit: 10, statuses: ['queued', 'running'] }), plan), `${plan}, live`, 4);
    }
  });

  it('bulk-cancels the waiting and claimed tasks oldest first, reading only the tenant\'s rows and those in flight', async () => {
    for (const plan of ['generic', 'custom'] as const) {
      expectBounded(await planOf((q) => cancelMatchingTasks(q, { tenant: 'small', match: {}, limit: 2 }), plan), `${plan}, a batch of 2`, 4);
    }
    const first = await cancelMatchingTasks(t.db, { tenant: 'small', match: {}, limit: 2 });
    expect(first).toEqual([small.claimed, small.queued]);
    expect(await cancelMatchingTasks(t.db, { tenant: 'small', match: {}, limit: 2, afterId: first.at(-1) })).toEqual([small.scheduled]);
    expect(await cancelMatchingTasks(t.db, { tenant: 'small', match: {}, limit: 2 })).toEqual([]);
    const shown = await listTasks(t.db, 'small', { limit: 10 });
    expect(shown.map((x) => x.status)).toEqual(['cancelled', 'cancelled', 'running', 'cancelled', 'succeeded', 'succeeded']);
  });
});
