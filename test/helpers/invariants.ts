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
