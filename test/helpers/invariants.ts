// RELIABILITY.md's invariants as SQL over the test database (the transition
// trigger of test/setup/invariants.sql already enforces I3-I5 on every write).
import { expect } from 'vitest';
import type { Queryable } from '../../src/db/seam.ts';

/** I1: every task is terminal, or waiting for a run_at later than `now`. */
export async function expectNoLoss(db: Queryable, now: Date): Promise<void> {
  const stuck = await db.query<{ id: string; status: string }>(
    `select id, status from tasks
     where status not in ('succeeded', 'dead', 'cancelled', 'missed')
       and not (status = 'scheduled' and run_at > $1::timestamptz)
     order by id limit 20`,
    [now],
  );
  expect(stuck, 'I1: tasks neither terminal nor waiting for a future run_at').toEqual([]);
  await expectPendingCounted(db);
}

/** Every tenant's pending count (migration 0021, what maxPendingTasks reads) is its scheduled + queued + running tasks. */
export async function expectPendingCounted(db: Queryable): Promise<void> {
  const off = await db.query<{ tenant: string; counted: number; actual: number }>(
    `select tenant, coalesce(c.n, 0)::int as counted, coalesce(a.n, 0)::int as actual
     from (select tenant, sum(n) as n from tenant_pending_counts group by tenant) c
     full join (select tenant, count(*) as n from tasks where status in ('scheduled', 'queued', 'running') group by tenant) a
       using (tenant)
     where coalesce(c.n, 0) <> coalesce(a.n, 0)
     order by tenant`,
  );
  expect(off, 'pending counts that disagree with the tasks').toEqual([]);
}

/** I2: one accepted completion per succeeded task, with its final epoch. */
export async function expectOneCompletion(db: Queryable): Promise<void> {
  const bad = await db.query<{ task_id: string }>(
    `select e.task_id from task_events e join tasks t on t.id = e.task_id
     where e.to_status = 'succeeded'
     group by e.task_id, t.lease_epoch
     having count(*) <> 1 or max(e.epoch) <> t.lease_epoch
     limit 20`,
  );
  expect(bad, 'I2: succeeded tasks with other than one completion at their final epoch').toEqual([]);
}

/** I4: attempts never exceed max_attempts (also a CHECK); returns the histogram. */
export async function attemptsByStatus(db: Queryable): Promise<Record<string, number>> {
  const rows = await db.query<{ status: string; attempts: number; n: number }>(
    `select status, attempts, count(*)::int as n from tasks group by 1, 2 order by 1, 2`,
  );
  return Object.fromEntries(rows.map((r) => [`${r.status}/${r.attempts}`, r.n]));
}
