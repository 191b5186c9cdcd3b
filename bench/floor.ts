// The floor of the drain's row work (issue 12): what the three writes the
// guarantees need per task (the claim, so a lost sweep spends no attempt; the
// fenced start, so an attempt is spent and at-most-once holds before the
// handler runs; the fenced finish, so the outcome is kept for retention) cost
// at their barest, beside graphile-worker's two writes (its claim spends the
// attempt; its finish deletes the job) done the same way. Each design is a
// bare table and bare statements with no CTEs, flow control, fairness, trace
// or bookkeeping, driven by one connection: a batch insert of the bench's
// payloads, then claims of 500 and starts and finishes of `queueBatch`, so
// nothing waits on a lock and every page has what room its fillfactor
// leaves. Per task: the insert's rate, and the server's CPU, WAL and row
// versions over the drain's writes. A floor, not a design to build: the
// reaper, retention and the API need more than these tables hold, except
// where a design says it carries it.
import pg from 'pg';
import type { Ctx } from './context.ts';
import { cpuBetween } from './cpu.ts';
import { delta, snapshot } from './pgstats.ts';
import { freshProjectDatabase } from './project.ts';
import { withClient } from './server.ts';
import { benchPayload } from './settings.ts';

export interface FloorResult {
  tasks: number;
  /** The bare batch enqueue: tasks/s through one connection, and the server's CPU per task. */
  enqueueRate: number;
  enqueueCpuUs: number;
  /** The drain's writes, per task. */
  cpuUs: number;
  walBytes: number;
  versions: number;
  hotRatio: number;
}

interface Design {
  /** DDL of the design's tables, run in a fresh database; `migrations`: the project's own schema. */
  schema: string;
  /** DDL run after the migrations (`schema: 'migrations'`). */
  alter?: string;
  /** Enqueues a batch: payloads `$1` (JSON texts), numbered from `$2` + 1 (ids where the design names them, vtimes). */
  enqueue: string;
  /** Claims up to `$1` tasks; returns (id, epoch). */
  claim: string;
  /** The fenced start of `$1` ids at epochs `$2`, if the design has one. */
  start?: string;
  /** The fenced finish of `$1` ids at epochs `$2`. */
  finish: string;
  tables: string[];
}

const items = `unnest($1::jsonb[]) with ordinality as i(payload, o)`;
const batch = `from unnest($1::bigint[], $2::int[]) b(id, epoch) where s.id = b.id and s.epoch = b.epoch`;

/** The fenced start and finish of today's row, by id and lease epoch. */
const todayFenced = (set: string) =>
  `update tasks s set ${set}
   from unnest($1::bigint[], $2::int[]) b(id, epoch) where s.id = b.id and s.lease_epoch = b.epoch and s.status = 'running'`;
const TODAY_START = todayFenced(`attempts = s.attempts + 1, started_at = now(), lease_expires_at = now() + interval '5 minutes', updated_at = now()`);
const TODAY_FINISH = todayFenced(`status = 'succeeded', finished_at = now(), lease_expires_at = null, updated_at = now()`);

/** The reaper's one row per claimed batch: its table, and a claim (`update ... returning s.id, epoch`) that writes it. */
const CLAIM_ROWS = `
      create table claims (id bigint generated always as identity primary key, lease_expires_at timestamptz not null, ids bigint[] not null);
      create index claims_lease on claims (lease_expires_at);`;
const writingClaimRow = (update: string) => `with c as (${update}),
            b as (insert into claims (lease_expires_at, ids) select now() + interval '5 minutes', array_agg(id) from c having count(*) > 0)
            select id, epoch from c`;

/** The start and finish of the state rows with one index: HOT, as neither changes an indexed column. */
const HOT_START = `update state s set attempts = s.attempts + 1, started_at = now() ${batch} and s.finished_at is null`;
const HOT_FINISH = `update state s set outcome = 's', finished_at = now(), lease_expires_at = null ${batch} and s.finished_at is null`;
const ONE_INDEX_ENQUEUE = `with s as (insert into state (id, queue, vtime) select $2::bigint + i.o, 'q', $2::bigint + i.o from ${items})
              insert into body (id, payload) select $2::bigint + i.o, i.payload from ${items}`;

export const FLOOR_DESIGNS = {
  /**
   * Today's row and indexes (the project's migrations), written by the bare
   * statements: what the row work costs without the statements around it.
   */
  "today's row": {
    schema: 'migrations',
    enqueue: `insert into tasks (tenant, queue, task, payload, status, run_at, vtime)
              select 'bench', 'default', 'noop', i.payload, 'queued', now(), $2::bigint + i.o from ${items}`,
    claim: `update tasks s set status = 'running', lease_epoch = s.lease_epoch + 1, claimed_by = 'w', dispatched_at = now(),
              lease_expires_at = now() + interval '5 minutes', updated_at = now()
            where s.id in (select id from tasks where queue = 'default' and status = 'queued' and not parked order by vtime, id limit $1 for update skip locked)
            returning s.id, s.lease_epoch as epoch`,
    start: TODAY_START,
    finish: TODAY_FINISH,
    tables: ['public.tasks'],
  },
  /**
   * Today's row with `status` in no index: a column `wait` ('scheduled',
   * 'queued' or null, changed only where a task starts or stops waiting)
   * takes its place in the waiting tasks' indexes; retention reads a BRIN
   * index of the finish time, a tenant's finished tasks an index of columns
   * no write changes, the reaper one row per claimed batch. The claim leaves
   * the waiting indexes; the start and the finish change no indexed column,
   * so they are HOT where the page has room (from PostgreSQL 16: a BRIN
   * index does not stop HOT).
   */
  "today's row, status in no index": {
    schema: 'migrations',
    alter: `
      alter table tasks add column wait text;
      drop index tasks_runnable_idx, tasks_runnable_priority_idx, tasks_pending_tenant_idx, tasks_running_idx,
        tasks_finished_idx, tasks_finished_tenant_idx, tasks_due_order_idx, tasks_parked_priority_idx,
        tasks_concurrency_key_waiting_idx, tasks_live_occurrences_idx;
      create index tasks_runnable_idx on tasks (queue, vtime, id) where wait = 'queued' and not parked;
      create index tasks_runnable_priority_idx on tasks (queue, tenant, priority desc, run_at, id) where wait = 'queued' and not parked;
      create index tasks_pending_tenant_idx on tasks (tenant, id) where wait is not null;
      create index tasks_due_order_idx on tasks (run_at, id) where wait = 'scheduled';
      create index tasks_parked_priority_idx on tasks (tenant, concurrency_key, priority desc, vtime, id) where wait = 'queued' and parked;
      create index tasks_concurrency_key_waiting_idx on tasks (tenant, concurrency_key) where concurrency_key is not null and wait is not null;
      create index tasks_live_occurrences_idx on tasks (schedule_id) where schedule_id is not null;
      create index tasks_tenant_idx on tasks (tenant, id);
      create index tasks_finished_idx on tasks using brin (finished_at);${CLAIM_ROWS}`,
    enqueue: `insert into tasks (tenant, queue, task, payload, status, wait, run_at, vtime)
              select 'bench', 'default', 'noop', i.payload, 'queued', 'queued', now(), $2::bigint + i.o from ${items}`,
    claim: writingClaimRow(
      `update tasks s set status = 'running', wait = null, lease_epoch = s.lease_epoch + 1, claimed_by = 'w', dispatched_at = now(),
         lease_expires_at = now() + interval '5 minutes', updated_at = now()
       where s.id in (select id from tasks where queue = 'default' and wait = 'queued' and not parked order by vtime, id limit $1 for update skip locked)
       returning s.id, s.lease_epoch as epoch`,
    ),
    start: TODAY_START,
    finish: TODAY_FINISH,
    tables: ['public.tasks', 'public.claims'],
  },
  /**
   * The state row alone (the narrow-row lead): the columns the three
   * writes change, with the status indexes a drained task passes through today
   * (runnable, pending by tenant, running, finished, finished by tenant). The
   * payload stays in a wide row the drain never writes.
   */
  'narrow state row': {
    schema: `
      create table state (id bigint primary key, queue text not null, tenant text not null, status text not null,
        vtime bigint not null, run_at timestamptz not null, epoch int not null default 0, attempts int not null default 0,
        claimed_by text, lease_expires_at timestamptz, started_at timestamptz, finished_at timestamptz) with (fillfactor = 70);
      create index state_runnable on state (queue, vtime, id) where status = 'queued';
      create index state_pending_tenant on state (tenant, id) where status in ('scheduled', 'queued');
      create index state_running on state (id) where status = 'running';
      create index state_finished on state (finished_at) where status in ('succeeded', 'dead');
      create index state_finished_tenant on state (tenant, id) where status in ('succeeded', 'dead');
      create table body (id bigint primary key, payload jsonb not null, outcome jsonb);`,
    enqueue: `with s as (insert into state (id, queue, tenant, status, vtime, run_at)
                select $2::bigint + i.o, 'q', 't' || (i.o % 10), 'queued', $2::bigint + i.o, now() from ${items})
              insert into body (id, payload) select $2::bigint + i.o, i.payload from ${items}`,
    claim: `update state s set status = 'running', epoch = s.epoch + 1, claimed_by = 'w', lease_expires_at = now() + interval '5 minutes'
            where s.id in (select id from state where queue = 'q' and status = 'queued' order by vtime, id limit $1 for update skip locked)
            returning s.id, s.epoch`,
    start: `update state s set attempts = s.attempts + 1, started_at = now(), lease_expires_at = now() + interval '5 minutes' ${batch} and s.status = 'running'`,
    finish: `update state s set status = 'succeeded', finished_at = now(), lease_expires_at = null ${batch} and s.status = 'running'`,
    tables: ['public.state', 'public.body'],
  },
  /**
   * The least three writes can cost: one index that a task leaves once (at the
   * claim, through a flag no later write touches), no status index at all, so
   * the start and the finish are HOT; a wide fillfactor so they find room.
   */
  'one index, HOT start and finish': {
    schema: `
      create table state (id bigint primary key, queue text not null, waiting boolean not null default true, vtime bigint not null,
        epoch int not null default 0, attempts int not null default 0, lease_expires_at timestamptz,
        started_at timestamptz, finished_at timestamptz, outcome "char") with (fillfactor = 50);
      create index state_runnable on state (queue, vtime, id) where waiting;
      create table body (id bigint primary key, payload jsonb not null);`,
    enqueue: ONE_INDEX_ENQUEUE,
    claim: `update state s set waiting = false, epoch = s.epoch + 1, lease_expires_at = now() + interval '5 minutes'
            where s.id in (select id from state where queue = 'q' and waiting order by vtime, id limit $1 for update skip locked)
            returning s.id, s.epoch`,
    start: HOT_START,
    finish: HOT_FINISH,
    tables: ['public.state', 'public.body'],
  },
  /**
   * The same with what the reaper, retention and the API still need, each
   * built so that the start and the finish stay HOT: a tenant's tasks by an
   * index of columns no write changes; retention by a BRIN index of the
   * finish time (summarizing indexes do not stop HOT updates from
   * PostgreSQL 16); the reaper by one row per claimed batch (its lease and
   * ids), written by the claim, not one index entry per task.
   */
  'one index, HOT, with reaper and retention': {
    schema: `
      create table state (id bigint primary key, queue text not null, tenant text not null, waiting boolean not null default true,
        vtime bigint not null, epoch int not null default 0, attempts int not null default 0, lease_expires_at timestamptz,
        started_at timestamptz, finished_at timestamptz, outcome "char") with (fillfactor = 50);
      create index state_runnable on state (queue, vtime, id) where waiting;
      create index state_tenant on state (tenant, id);
      create index state_finished on state using brin (finished_at);${CLAIM_ROWS}
      create table body (id bigint primary key, payload jsonb not null);`,
    enqueue: `with s as (insert into state (id, queue, tenant, vtime) select $2::bigint + i.o, 'q', 't' || (i.o % 10), $2::bigint + i.o from ${items})
              insert into body (id, payload) select $2::bigint + i.o, i.payload from ${items}`,
    claim: writingClaimRow(
      `update state s set waiting = false, epoch = s.epoch + 1, lease_expires_at = now() + interval '5 minutes'
       where s.id in (select id from state where queue = 'q' and waiting order by vtime, id limit $1 for update skip locked)
       returning s.id, s.epoch`,
    ),
    start: HOT_START,
    finish: HOT_FINISH,
    tables: ['public.state', 'public.body', 'public.claims'],
  },
  /**
   * The same with no start: the claim spends the attempt, as
   * graphile-worker's does. What the start's version costs, and what the
   * guarantees that need it (no attempt spent on a lost sweep, cancel until
   * start, at-most-once from the start) are worth.
   */
  'one index, no start': {
    schema: `
      create table state (id bigint primary key, queue text not null, waiting boolean not null default true, vtime bigint not null,
        epoch int not null default 0, attempts int not null default 0, lease_expires_at timestamptz,
        finished_at timestamptz, outcome "char") with (fillfactor = 50);
      create index state_runnable on state (queue, vtime, id) where waiting;
      create table body (id bigint primary key, payload jsonb not null);`,
    enqueue: ONE_INDEX_ENQUEUE,
    claim: `update state s set waiting = false, epoch = s.epoch + 1, attempts = s.attempts + 1, lease_expires_at = now() + interval '5 minutes'
            where s.id in (select id from state where queue = 'q' and waiting order by vtime, id limit $1 for update skip locked)
            returning s.id, s.epoch`,
    finish: HOT_FINISH,
    tables: ['public.state', 'public.body'],
  },
  /**
   * graphile-worker's two writes the same way: a claim that spends the
   * attempt and a finish that deletes, over a row that carries its payload.
   */
  'graphile-worker shape': {
    schema: `
      create table jobs (id bigint primary key, queue text not null, run_at timestamptz not null, payload jsonb not null,
        attempts int not null default 0, locked_at timestamptz, locked_by text);
      create index jobs_runnable on jobs (queue, run_at, id) where locked_at is null;`,
    enqueue: `insert into jobs (id, queue, run_at, payload) select $2::bigint + i.o, 'q', now(), i.payload from ${items}`,
    claim: `update jobs s set locked_at = now(), locked_by = 'w', attempts = s.attempts + 1
            where s.id in (select id from jobs where queue = 'q' and locked_at is null order by run_at, id limit $1 for update skip locked)
            returning s.id, s.attempts as epoch`,
    finish: `delete from jobs s using unnest($1::bigint[], $2::int[]) b(id, attempts) where s.id = b.id and s.locked_by = 'w'`,
    tables: ['public.jobs'],
  },
} satisfies Record<string, Design>;
export type FloorDesign = keyof typeof FLOOR_DESIGNS;

const SWEEP_BATCH = 500;

export async function floorCycle(ctx: Ctx, name: FloorDesign): Promise<FloorResult> {
  const design: Design = FLOOR_DESIGNS[name];
  const { settings: s } = ctx;
  const url = design.schema === 'migrations' ? await freshProjectDatabase(ctx, 'bench_floor') : await ctx.server.freshDatabase('bench_floor');
  // The enqueue's connection is closed before the drain's counters are read:
  // a backend reports its table counters when it exits, not per statement.
  const texts = Array.from({ length: s.tasks }, (_, n) => JSON.stringify(benchPayload(n)));
  const enqueued = await withClient(url, async (c) => {
    await c.query(design.schema === 'migrations' ? (design.alter ?? 'select') : design.schema);
    const e0 = ctx.cpu();
    for (let i = 0; i < s.tasks; i += s.batchSize) {
      const part = texts.slice(i, i + s.batchSize);
      const put = await c.query({ name: 'enqueue', text: design.enqueue, values: [part, i] });
      if (put.rowCount !== part.length) throw new Error(`floor ${name}: enqueued ${put.rowCount} of ${part.length}`);
    }
    const use = cpuBetween(e0, ctx.cpu());
    await c.query('vacuum analyze');
    return use;
  });
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  let done = 0;
  try {
    const before = await snapshot(url, design.tables);
    const cpu0 = ctx.cpu();
    for (;;) {
      const claimed = (await c.query<{ id: string; epoch: number }>({ name: 'claim', text: design.claim, values: [SWEEP_BATCH] })).rows;
      if (claimed.length === 0) break;
      for (let i = 0; i < claimed.length; i += s.queueBatch) {
        const part = claimed.slice(i, i + s.queueBatch);
        const values = [part.map((r) => r.id), part.map((r) => r.epoch)];
        if (design.start) {
          const started = await c.query({ name: 'start', text: design.start, values });
          if (started.rowCount !== part.length) throw new Error(`floor ${name}: started ${started.rowCount} of ${part.length}`);
        }
        const finished = await c.query({ name: 'finish', text: design.finish, values });
        if (finished.rowCount !== part.length) throw new Error(`floor ${name}: finished ${finished.rowCount} of ${part.length}`);
        done += part.length;
      }
    }
    const cpu = cpuBetween(cpu0, ctx.cpu());
    await c.end();
    const after = await snapshot(url, design.tables);
    if (done !== s.tasks) throw new Error(`floor ${name}: ${done} of ${s.tasks} tasks went through`);
    const d = await delta(url, before, after);
    const t = Object.values(d.tables);
    const updated = t.reduce((a, x) => a + x.updated, 0);
    return {
      tasks: done,
      enqueueRate: s.tasks / enqueued.wallSeconds,
      enqueueCpuUs: (enqueued.postgres * 1e6) / s.tasks,
      cpuUs: (cpu.postgres * 1e6) / done,
      walBytes: d.walBytes / done,
      versions: t.reduce((a, x) => a + x.inserted + x.updated, 0) / done,
      hotRatio: updated > 0 ? t.reduce((a, x) => a + x.hotUpdated, 0) / updated : NaN,
    };
  } finally {
    await c.end().catch(() => {});
  }
}
