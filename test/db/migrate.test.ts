import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { inject } from 'vitest';
import { loadMigrations } from '../../scripts/migrations.ts';
import { openNodeDb } from '../../scripts/node-db.ts';
import { migrate } from '../../src/db/migrate.ts';
import { finishIfRunning, startIfClaimed } from '../../src/db/sql/tasks-fence.ts';
import { getTask, listTasks } from '../../src/db/sql/tasks-read.ts';
import { cancelMatchingTasks } from '../../src/db/sql/bulkCancel.ts';
import { promoteDueTasks, purgeFinishedTasks, purgeSpentKeys, reapExpiredLeases } from '../../src/db/sql/tasks-maintenance.ts';
import { purgeIdleFlowControl } from '../../src/db/sql/concurrency.ts';
import { listApiKeys, listKnownTenants, queueStats } from '../../src/db/sql/tenants.ts';
import type { Db } from '../../src/db/seam.ts';
import { expectPendingCounted } from '../helpers/invariants.ts';
import { databaseUrl } from '../setup/global.ts';

// These tests start from an empty database, not the migrated template.
describe('migrate', () => {
  let admin: Db;
  const created: string[] = [];
  const emptyDb = async () => {
    const name = `sched_m${Math.random().toString(36).slice(2, 10)}_${inject('runId')}`;
    await admin.query(`create database ${name}`);
    created.push(name);
    return openNodeDb(databaseUrl(inject('adminDatabaseUrl'), name), { wsProxy: inject('wsProxy'), maxConnections: 4 });
  };
  /** An empty database migrated up to, not including, the migration named `prefix`. */
  const dbBefore = async (prefix: string) => {
    const db = await emptyDb();
    const migrations = await loadMigrations();
    const at = migrations.findIndex((m) => m.name.startsWith(prefix));
    expect(at).toBeGreaterThan(0);
    await migrate(db, migrations.slice(0, at));
    return { db, migrations, at };
  };

  beforeAll(async () => {
    admin = await openNodeDb(inject('adminDatabaseUrl'), { wsProxy: inject('wsProxy'), maxConnections: 1 });
  });
  afterAll(async () => {
    for (const name of created) await admin.query(`drop database if exists ${name} with (force)`);
    await admin.close();
  });

  it('applies every file once, in order, and a second run changes nothing', async () => {
    const db = await emptyDb();
    const migrations = await loadMigrations();
    expect(migrations.length).toBeGreaterThanOrEqual(2);
    const first = await migrate(db, migrations);
    expect(first.applied).toEqual(migrations.map((m) => m.name));
    const schemaBefore = await db.query(
      `select table_name, column_name, data_type from information_schema.columns where table_schema = 'public' order by 1, 2`,
    );
    const second = await migrate(db, migrations);
    expect(second.applied).toEqual([]);
    expect(second.skipped).toEqual(migrations.map((m) => m.name));
    const schemaAfter = await db.query(
      `select table_name, column_name, data_type from information_schema.columns where table_schema = 'public' order by 1, 2`,
    );
    expect(schemaAfter).toEqual(schemaBefore);
    const rows = await db.query<{ name: string }>('select name from schema_migrations order by name');
    expect(rows.map((r) => r.name)).toEqual(migrations.map((m) => m.name));
    await db.close();
  });

  it('two runners started at once apply each file exactly once', async () => {
    const db = await emptyDb();
    const other = await openNodeDb(databaseUrl(inject('adminDatabaseUrl'), created.at(-1)!), {
      wsProxy: inject('wsProxy'),
      maxConnections: 4,
    });
    const migrations = await loadMigrations();
    const [a, b] = await Promise.all([migrate(db, migrations), migrate(other, migrations)]);
    expect([...a.applied, ...b.applied].sort()).toEqual(migrations.map((m) => m.name).sort());
    expect(a.applied.filter((n) => b.applied.includes(n))).toEqual([]);
    await db.close();
    await other.close();
  });

  it('refuses to run when an applied file was edited, and applies nothing', async () => {
    const db = await emptyDb();
    const migrations = await loadMigrations();
    await migrate(db, migrations.slice(0, 1));
    const edited = migrations.map((m, i) => (i === 0 ? { ...m, text: `${m.text}\n-- edited` } : m));
    await expect(migrate(db, edited)).rejects.toThrow(/0001_data_model\.sql was edited/);
    const rows = await db.query<{ name: string }>('select name from schema_migrations');
    expect(rows.map((r) => r.name)).toEqual([migrations[0]!.name]);
    await db.close();
  });

  it('a failing file is rolled back whole and not recorded', async () => {
    const db = await emptyDb();
    const migrations = await loadMigrations();
    const broken = [...migrations, { name: '9999_broken.sql', text: 'create table half_done (id int); select 1/0;' }];
    await expect(migrate(db, broken)).rejects.toThrow(/division by zero/);
    const tables = await db.query(`select 1 from information_schema.tables where table_name = 'half_done'`);
    expect(tables).toEqual([]);
    const rows = await db.query<{ name: string }>('select name from schema_migrations order by name');
    expect(rows.map((r) => r.name)).toEqual(migrations.map((m) => m.name));
    await db.close();
  });

  it('0015 (dispatch marks) carries over tasks in every status, and tasks marked the old way keep their dispatch lease', async () => {
    const { db, migrations, at } = await dbBefore('0015_');
    const T0 = new Date('2026-12-01T12:00:00Z');
    const s = (n: number) => new Date(T0.getTime() + n * 1000).toISOString();
    // status, attempts, epoch, vtime, lease, dispatched, started, finished
    const rows: [string, number, number, number | null, string | null, string | null, string | null, string | null][] = [
      ['scheduled', 0, 0, null, null, null, null, null],
      ['queued', 0, 0, 1, null, null, null, null],
      ['running', 1, 1, 2, s(60), null, null, null], // claimed, never sent
      ['running', 1, 1, 3, s(900), s(0), null, null], // sent, marked on the row
      ['running', 1, 1, 4, s(100), s(0), s(1), null], // started
      ['succeeded', 1, 1, 5, null, s(0), s(1), s(2)],
      ['dead', 5, 5, 6, null, s(0), s(1), s(2)],
      ['cancelled', 0, 0, null, null, null, null, s(2)],
      ['missed', 0, 0, null, null, null, null, s(2)],
    ];
    for (const [status, attempts, epoch, vtime, lease, dispatched, started, finished] of rows) {
      await db.query(
        `insert into tasks (tenant, task, status, run_at, attempts, lease_epoch, vtime, claimed_by, lease_expires_at,
                            dispatched_at, started_at, finished_at)
         values ('acme', 'noop', $1::text, $2::timestamptz, $3::int, $4::bigint, $5::float8,
                 case when $1::text = 'running' then 'old-sweep' end, $6::timestamptz, $7::timestamptz, $8::timestamptz, $9::timestamptz)`,
        [status, T0, attempts, epoch, vtime, lease, dispatched, started, finished],
      );
    }
    const snapshot = () => db.query(`select to_jsonb(t) - 'claim_token' as row from tasks t order by id`);
    const before = await snapshot();
    const result = await migrate(db, migrations.slice(0, at + 1));
    expect(result.applied).toEqual([migrations[at]!.name]);
    expect(await snapshot()).toEqual(before);
    expect(await db.query(`select count(*)::int as n from tasks where claim_token is not null`)).toEqual([{ n: 0 }]);
    await migrate(db, migrations); // the later ones too, then the runtime statements over the carried rows

    // Past the claim lease: only the task never sent goes back (no attempt spent).
    expect(await reapExpiredLeases(db, { now: new Date(s(61)), limit: 100, dispatchLeaseSeconds: 900 })).toEqual({ requeued: 1, retried: 0, dead: 0 });
    expect(await getTask(db, 'acme', '3')).toMatchObject({ status: 'queued', attempts: 0 });
    // The task marked the old way is still held, starts under its epoch and keeps its dispatch time.
    const { started } = await startIfClaimed(db, { now: new Date(s(62)), tasks: [{ id: '4', epoch: 1 }], leaseGraceSeconds: 30 });
    expect(started.map((x) => x.task.id)).toEqual(['4']);
    expect((await getTask(db, 'acme', '4'))?.dispatchedAt).toEqual(new Date(s(0)));
    const { finished } = await finishIfRunning(db, {
      now: new Date(s(63)),
      results: ['4', '5'].map((id) => ({ id, epoch: 1, outcome: 'succeeded' as const, error: null, retryDelayMs: null })),
    });
    expect(finished.map((f) => [f.id, f.status]).sort()).toEqual([['4', 'succeeded'], ['5', 'succeeded']]);
    await db.close();
  });

  it('0021 (pending counts) counts the tasks already pending, per tenant, in every status', async () => {
    const { db, migrations } = await dbBefore('0021_');
    await insertTasksInEveryStatus(db);
    await migrate(db, migrations);
    const counts = await db.query(`select tenant, sum(n)::int as n from tenant_pending_counts group by tenant order by tenant`);
    expect(counts).toEqual([{ tenant: 'acme', n: 3 }, { tenant: 'beta', n: 9 }]);
    await expectPendingCounted(db);
    await db.close();
  });

  it("0025 (the pending index without running tasks) rebuilds the index over tasks in every status; the queue counts still show each", async () => {
    const { db, migrations } = await dbBefore('0025_');
    await insertTasksInEveryStatus(db);
    await migrate(db, migrations);
    // Read through the rebuilt index (the planner may not take the table): the waiting tasks, not the running ones.
    expect(await betaThrough(db, 'tasks_pending_tenant_idx', `status in ('scheduled', 'queued')`)).toBe(6);
    const [beta] = await queueStats(db, { tenant: 'beta', finishedWindowSeconds: 3_600 });
    // Claimed and not started shows as queued.
    expect(beta!.counts).toEqual({ scheduled: 3, queued: 6, running: 0, succeeded: 3, dead: 3, cancelled: 3, missed: 3 });
    await db.close();
  });

  it('0026 (the tenant indexes by status) carries over tasks in every status: the list shows each, the bulk cancel takes the waiting and claimed ones', async () => {
    const { db, migrations } = await dbBefore('0026_');
    await insertTasksInEveryStatus(db);
    await migrate(db, migrations);
    // Read through each rebuilt index (the planner may not take the table).
    expect(await betaThrough(db, 'tasks_pending_tenant_idx', `status in ('scheduled', 'queued')`)).toBe(6);
    expect(await betaThrough(db, 'tasks_finished_tenant_idx', `status in ('succeeded', 'dead', 'cancelled', 'missed')`)).toBe(12);
    const listed = await listTasks(db, 'beta', { limit: 100 });
    expect(listed.map((x) => x.status).sort()).toEqual(
      ['scheduled', 'queued', 'running', 'succeeded', 'dead', 'cancelled', 'missed'].flatMap((x) => [x, x, x]).sort(),
    );
    expect(listed.map((x) => BigInt(x.id))).toEqual(listed.map((x) => BigInt(x.id)).sort((a, b) => (a < b ? 1 : -1)));
    // The three claimed and not started (no started_at) are cancelled with the six waiting.
    expect(await cancelMatchingTasks(db, { tenant: 'beta', match: {}, limit: 100 })).toHaveLength(9);
    const [beta] = await queueStats(db, { tenant: 'beta', finishedWindowSeconds: 3_600 });
    expect(beta!.counts).toEqual({ scheduled: 0, queued: 0, running: 0, succeeded: 3, dead: 3, cancelled: 12, missed: 3 });
    await db.close();
  });

  it("0027 (the retention by age) rebuilds the finished tenant index over tasks in every status: the list shows the finished ones, the purge takes them all", async () => {
    const { db, migrations } = await dbBefore('0027_');
    await insertTasksInEveryStatus(db);
    await migrate(db, migrations);
    expect(await betaThrough(db, 'tasks_finished_tenant_idx', `status in ('succeeded', 'dead', 'cancelled', 'missed')`)).toBe(12);
    const listed = await listTasks(db, 'beta', { limit: 100, statuses: ['succeeded', 'dead', 'cancelled', 'missed'] });
    expect(listed).toHaveLength(12);
    expect((await purgeFinishedTasks(db, { now: new Date(Date.now() + 60_000), retentionSeconds: 1, limit: 100, markRetentionSeconds: 3_600 })).purged).toBe(16);
    expect(await db.query(`select status, count(*)::int as n from tasks group by status order by status`)).toEqual([
      { status: 'queued', n: 4 },
      { status: 'running', n: 4 },
      { status: 'scheduled', n: 4 },
    ]);
    await db.close();
  });

  it("0028 (a schedule's live occurrences) indexes the waiting and running occurrences of tasks in every status", async () => {
    const { db, migrations } = await dbBefore('0028_');
    await insertTasksInEveryStatus(db);
    await db.query(
      `insert into schedules (id, tenant, name, kind, interval_seconds, timezone, task, payload, queue, max_attempts, options,
                              misfire, misfire_grace_seconds, catch_up_limit, overlap, enabled, next_run_at)
       overriding system value values (1, 'beta', 'every-minute', 'interval', 60, 'UTC', 'noop', '{}', 'default', 5, '{}',
                                       'run_once', 60, 10, 'skip', true, now())`,
    );
    await db.query(`update tasks set schedule_id = 1, scheduled_for = now() + id * interval '1 second' where tenant = 'beta'`);
    await migrate(db, migrations);
    expect(await betaThrough(db, 'tasks_live_occurrences_idx', `schedule_id = 1 and status in ('scheduled', 'queued', 'running')`)).toBe(9);
    await db.close();
  });

  it('0029 (spent keys and rate lines by age) indexes the rows already there, keeps an index built by hand first, and the purges take the old ones alone', async () => {
    const { db, migrations } = await dbBefore('0029_');
    // As the README says to do on a large table: built concurrently, then migrated.
    await db.query(`create index concurrently spent_idempotency_keys_spent_at_idx on spent_idempotency_keys (spent_at)`);
    for (const [age, keys] of [['10 days', ['old-1', 'old-2']], ['1 hour', ['young']]] as const) {
      for (const key of keys) {
        await db.query(
          `with spent as (insert into spent_idempotency_keys (tenant, idempotency_key, task_id, status, spent_at)
                          values ('beta', $1::text, 1, 'succeeded', now() - $2::interval)),
                claims as (insert into rate_limits (tenant, key, max_starts, period_seconds, next_claim_at)
                           values ('beta', $1::text, 1, 60, now() - $2::interval))
           insert into rate_start_lines (tenant, key, next_start_at) values ('beta', $1::text, now() - $2::interval)`,
          [key, age],
        );
      }
    }
    await migrate(db, migrations);
    expect(
      await db.query(`select c.relname as index from pg_index i join pg_class c on c.oid = i.indexrelid
                      where i.indisvalid and c.relname in
                        ('spent_idempotency_keys_spent_at_idx', 'rate_limits_next_claim_at_idx', 'rate_start_lines_next_start_at_idx')
                      order by 1`),
    ).toEqual([{ index: 'rate_limits_next_claim_at_idx' }, { index: 'rate_start_lines_next_start_at_idx' }, { index: 'spent_idempotency_keys_spent_at_idx' }]);
    const week = 7 * 86_400;
    expect(await purgeSpentKeys(db, { retentionSeconds: week, limit: 100 })).toBe(2);
    expect(await purgeIdleFlowControl(db, { retentionSeconds: week, limit: 100, keys: [] })).toEqual({ slots: 0, rates: 2 });
    expect(
      await db.query(`select (select array_agg(idempotency_key) from spent_idempotency_keys) as spent,
                             (select array_agg(key) from rate_limits) as claims, (select array_agg(key) from rate_start_lines) as starts`),
    ).toEqual([{ spent: ['young'], claims: ['young'], starts: ['young'] }]);
    await db.close();
  });

  it('0030 (admin reads by tenant) indexes the keys and tenants already there and keeps an index built by hand first', async () => {
    const { db, migrations } = await dbBefore('0030_');
    await db.query(`create index concurrently api_keys_tenant_idx on api_keys (tenant, id)`);
    await db.query(`insert into api_keys (tenant, prefix, key_hash) values ('beta', 'p1', 'h1'), ('alpha', 'p2', 'h2'), ('beta', 'p3', 'h3')`);
    await db.query(`insert into tenants (queue, tenant) values ('default', 'gamma'), ('mail', 'beta')`);
    await migrate(db, migrations);
    expect(
      await db.query(`select c.relname as index from pg_index i join pg_class c on c.oid = i.indexrelid
                      where i.indisvalid and c.relname in ('api_keys_tenant_idx', 'tenants_tenant_idx') order by 1`),
    ).toEqual([{ index: 'api_keys_tenant_idx' }, { index: 'tenants_tenant_idx' }]);
    expect((await listApiKeys(db, { tenant: 'beta', limit: 10 })).map((k) => k.prefix)).toEqual(['p3', 'p1']);
    expect(await listKnownTenants(db, { limit: 10 })).toEqual(['alpha', 'beta', 'gamma']);
    await db.close();
  });

  it('0031 (the weight floor) raises a weight below it to the floor, keeps the others, and refuses a smaller one', async () => {
    const { db, migrations } = await dbBefore('0031_');
    await db.query(`insert into tenants (queue, tenant, weight) values ('default', 'tiny', 5e-324), ('default', 'small', 1e-6), ('default', 'big', 1000)`);
    await migrate(db, migrations);
    expect(await db.query(`select tenant, weight from tenants order by tenant`)).toEqual([
      { tenant: 'big', weight: 1000 },
      { tenant: 'small', weight: 0.001 },
      { tenant: 'tiny', weight: 0.001 },
    ]);
    await expect(db.query(`update tenants set weight = 0.0005 where tenant = 'big'`)).rejects.toThrow(/tenants_weight_range/);
    await db.close();
  });

  it("0033 (the concurrency key's waiting tasks) indexes the waiting keyed tasks of tasks in every status and drops the index of them all", async () => {
    const { db, migrations } = await dbBefore('0033_');
    await insertTasksInEveryStatus(db);
    await db.query(`update tasks set concurrency_key = 'k', concurrency_limit = 1`);
    await migrate(db, migrations);
    expect(await betaThrough(db, 'tasks_concurrency_key_waiting_idx', `concurrency_key = 'k' and status in ('scheduled', 'queued')`)).toBe(6);
    expect(await db.query(`select count(*)::int as n from pg_class where relname = 'tasks_concurrency_key_idx'`)).toEqual([{ n: 0 }]);
    await db.close();
  });

  it('0034 (parked tasks by priority) indexes the parked tasks of tasks in every status and drops the old index', async () => {
    const { db, migrations } = await dbBefore('0034_');
    await insertTasksInEveryStatus(db);
    await db.query(`update tasks set concurrency_key = 'k', concurrency_limit = 1, parked = (status = 'queued')`);
    await migrate(db, migrations);
    expect(await betaThrough(db, 'tasks_parked_priority_idx', `concurrency_key = 'k' and status = 'queued' and parked`)).toBe(3);
    expect(await db.query(`select count(*)::int as n from pg_class where relname = 'tasks_parked_idx'`)).toEqual([{ n: 0 }]);
    await db.close();
  });

  it('0035 (the due tasks in promote order) indexes the scheduled tasks of tasks in every status and drops the old index', async () => {
    const { db, migrations } = await dbBefore('0035_');
    await insertTasksInEveryStatus(db);
    await migrate(db, migrations);
    expect(await betaThrough(db, 'tasks_due_order_idx', `status = 'scheduled' and run_at <= now() + interval '1 day'`)).toBe(3);
    expect(await db.query(`select count(*)::int as n from pg_class where relname = 'tasks_due_idx'`)).toEqual([{ n: 0 }]);
    // The promote takes the due ones (the look-ahead reaches them all).
    expect(await promoteDueTasks(db, { now: new Date(Date.now() + 86_400_000), lookaheadSeconds: 60, limit: 100 })).toBe(4);
    await db.close();
  });

  it('0036 (the flow-control tables analyzed) leaves the planner sizing the unused flow-control tables as empty, not as ten pages', async () => {
    const { db, migrations } = await dbBefore('0036_');
    const estimated = async (table: string) => {
      const [row] = await db.query<{ 'QUERY PLAN': [{ Plan: { 'Plan Rows': number } }] }>(`explain (format json) select * from ${table}`);
      return row!['QUERY PLAN'][0].Plan['Plan Rows'];
    };
    for (const table of ['concurrency_slots', 'concurrency_frees']) expect(await estimated(table), `${table} before`).toBeGreaterThan(100);
    await migrate(db, migrations);
    for (const table of ['concurrency_slots', 'concurrency_frees']) expect(await estimated(table), `${table} after`).toBe(1);
    // Rows written later are seen by their pages, without another analyze.
    await db.query(`insert into concurrency_slots (tenant, key, max_running) select 'acme', 'k' || i, 1 from generate_series(1, 2000) i`);
    expect(await estimated('concurrency_slots')).toBeGreaterThan(1000);
    await db.close();
  });
});

/** Counts tenant beta's tasks matching `predicate`, with sequential and bitmap scans off; the plan must read `index`. */
async function betaThrough(db: Db, index: string, predicate: string): Promise<number> {
  return db.transaction(async (tx) => {
    await tx.query('set local enable_seqscan = off');
    await tx.query('set local enable_bitmapscan = off');
    const query = `select count(*)::int as n from tasks where ${predicate} and tenant = 'beta'`;
    const plan = await tx.query<{ 'QUERY PLAN': string }>(`explain ${query}`);
    expect(plan.map((r) => r['QUERY PLAN']).join('\n')).toContain(index);
    return (await tx.query<{ n: number }>(query))[0]!.n;
  });
}

/** One task of tenant acme and three of beta in every status, written as the SQL of the time would (running: claimed, not started). */
async function insertTasksInEveryStatus(db: Db): Promise<void> {
  const statuses = ['scheduled', 'queued', 'running', 'succeeded', 'dead', 'cancelled', 'missed'];
  for (const [tenant, copies] of [['acme', 1], ['beta', 3]] as const) {
    for (const status of statuses) {
      for (let i = 0; i < copies; i++) {
        await db.query(
          `insert into tasks (tenant, task, status, run_at, vtime, attempts, lease_epoch, claimed_by, lease_expires_at, finished_at)
           values ($1::text, 'noop', $2::text, now(), case when $2::text in ('queued', 'running') then 1 end,
                   case when $2::text = 'running' then 1 else 0 end,
                   case when $2::text = 'running' then 1 else 0 end, case when $2::text = 'running' then 'old-sweep' end,
                   case when $2::text = 'running' then now() + interval '1 minute' end,
                   case when $2::text in ('succeeded', 'dead', 'cancelled', 'missed') then now() end)`,
          [tenant, status],
        );
      }
    }
  }
}
