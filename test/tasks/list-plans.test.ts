// The task list's plans for a big tenant whose tasks are older than everyone
// else's (list_in_tenant_order, tasks-read.ts). Planned for its values (a
// custom plan: every new Worker connection's), the list of a tenant holding
// 30% of the history was read by walking tasks_pkey backwards, the planner
// taking the tenant's rows for spread evenly over ids: a tenant gone quiet
// then has every newer task of the others to cross before its first (an
// audit on PostgreSQL 15: 322,197 rows removed, 215 ms cold). The waiting
// arm the same, for a tenant whose backlog is older than the others'. These
// tests read the plans as run (EXPLAIN ANALYZE, rolled back), custom and
// generic: no scan of `tasks` reads more than a page.
import { beforeAll, describe, expect, it } from 'vitest';
import type { Queryable } from '../../src/db/seam.ts';
import { listTasks } from '../../src/db/sql/tasks-read.ts';
import { useTestDatabase, resetTables, T0, at } from '../helpers/db.ts';
import { explainAsRun, expectReadsAtMost } from '../helpers/plans.ts';

const t = useTestDatabase();

describe("a big tenant's task list, its tasks older than the others' many newer ones", () => {
  const HISTORY = 10_000; // 30% of it the quiet tenant's, finished
  const BACKLOG = 3_000; // the backlog tenant's waiting tasks, after the history
  // Then as many finished and as many waiting tasks of 1,000 other tenants:
  // with many tenants, a generic plan takes any one for a few rows.
  const NEWER = 20_000;
  const PAGE = 50;
  const newest: Record<'quiet' | 'backlog', string[]> = { quiet: [], backlog: [] };

  beforeAll(async () => {
    // Plans over statistics taken on purpose: no autoanalyze in between.
    await t.db.query('alter table tasks set (autovacuum_enabled = false)');
    await resetTables(t.db);
    await t.db.query(
      `insert into tasks (tenant, task, status, run_at, created_at, finished_at)
       select case when i % 10 < 3 then 'quiet' else 'old-' || i % 20 end, 'noop', 'succeeded', $1::timestamptz, $1::timestamptz, $1::timestamptz
       from generate_series(1, $2::int) i`,
      [T0, HISTORY],
    );
    await t.db.query(
      `insert into tasks (tenant, task, status, run_at, created_at)
       select 'backlog', 'noop', 'scheduled', $1::timestamptz, $2::timestamptz from generate_series(1, $3::int) i`,
      [at(86_400), at(1), BACKLOG],
    );
    await t.db.query(
      `insert into tasks (tenant, task, status, run_at, created_at, finished_at)
       select 'new-' || i % 1000, 'noop', 'succeeded', $1::timestamptz, $1::timestamptz, $1::timestamptz
       from generate_series(1, $2::int) i`,
      [at(2), NEWER],
    );
    await t.db.query(
      `insert into tasks (tenant, task, status, run_at, created_at)
       select 'new-' || i % 1000, 'noop', 'scheduled', $1::timestamptz, $2::timestamptz from generate_series(1, $3::int) i`,
      [at(86_400), at(3), NEWER],
    );
    await t.db.query('analyze tasks');
    for (const tenant of ['quiet', 'backlog'] as const) {
      const rows = await t.db.query<{ id: string }>(`select t.id::text as id from tasks t where t.tenant = $1 order by t.id desc limit $2`, [tenant, 2 * PAGE]);
      newest[tenant] = rows.map((r) => r.id);
      expect(newest[tenant]).toHaveLength(2 * PAGE);
    }
  });

  it('lists the newest first, a page at a time, by status too', async () => {
    for (const tenant of ['quiet', 'backlog'] as const) {
      const first = await listTasks(t.db, tenant, { limit: PAGE });
      expect(first.map((x) => x.id), `${tenant}: the first page`).toEqual(newest[tenant].slice(0, PAGE));
      const second = await listTasks(t.db, tenant, { limit: PAGE, beforeId: first.at(-1)!.id });
      expect(second.map((x) => x.id), `${tenant}: the second page`).toEqual(newest[tenant].slice(PAGE));
      const status = tenant === 'quiet' ? 'succeeded' : 'scheduled';
      const byStatus = await listTasks(t.db, tenant, { limit: PAGE, statuses: [status] });
      expect(byStatus.map((x) => x.id), `${tenant}: ${status}`).toEqual(newest[tenant].slice(0, PAGE));
      expect(new Set(byStatus.map((x) => x.status))).toEqual(new Set([status]));
      // The other arm's status: none of this tenant's.
      expect(await listTasks(t.db, tenant, { limit: PAGE, statuses: [tenant === 'quiet' ? 'scheduled' : 'succeeded'] })).toEqual([]);
    }
  });

  it('reads no more than a page of tasks, generic and custom', async () => {
    // [label, read, pages read]: a page reads itself alone, however deep
    // (cursor_in_index: the cursor starts the scan, generic plans included).
    const reads: [string, (q: Queryable) => Promise<unknown>, number][] = [
      ['quiet, first page', (q) => listTasks(q, 'quiet', { limit: PAGE }), 1],
      ['quiet, second page', (q) => listTasks(q, 'quiet', { limit: PAGE, beforeId: newest.quiet[PAGE - 1] }), 1],
      ['quiet, succeeded', (q) => listTasks(q, 'quiet', { limit: PAGE, statuses: ['succeeded'] }), 1],
      ['backlog, first page', (q) => listTasks(q, 'backlog', { limit: PAGE }), 1],
      ['backlog, second page', (q) => listTasks(q, 'backlog', { limit: PAGE, beforeId: newest.backlog[PAGE - 1] }), 1],
      ['backlog, scheduled', (q) => listTasks(q, 'backlog', { limit: PAGE, statuses: ['scheduled'] }), 1],
    ];
    for (const plan of ['custom', 'generic'] as const) {
      for (const [label, read, pages] of reads) {
        const { nodes, ms } = await explainAsRun(t.db, read, plan);
        const scans = nodes.filter((n) => n['Relation Name'] === 'tasks');
        expect(scans.length, `${plan}, ${label}: the scans of tasks`).toBeGreaterThan(0);
        expectReadsAtMost(scans, pages * PAGE + 2, `${plan}, ${label} (${ms.toFixed(1)} ms)`);
      }
    }
  });
});
