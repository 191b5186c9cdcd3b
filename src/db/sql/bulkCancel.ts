// Bulk cancel (issue 15): a tenant's tasks matching a filter that have not
// started, cancelled in bounded batches, one statement per batch.
import type { Queryable } from '../seam.ts';
import { sql } from '../seam.ts';
import { freeSlotsOf } from './concurrency.ts';
import { MATCH_PREDICATES, matchParams, type TaskMatch } from './replay.ts';
import { CLAIMED_NOT_STARTED, countPendingOf, WAITING, type Now } from './tasks-shared.ts';

/**
 * Statuses a task may show and still be cancelled, as the list shows them (a
 * task claimed early and not started shows `queued`). The filter matches the
 * shown status (MATCH_PREDICATES): stored, `queued` missed the tasks claimed
 * early, which then ran, and `running` took them, which the list shows queued.
 */
export const CANCELLABLE_STATUSES = ['scheduled', 'queued'] as const;

/**
 * The tenant's matching tasks of one arm of the not-started guard, up to $3
 * after `afterId` in id order, locked with SKIP LOCKED. A task has a tenant
 * index entry while it waits (tasks_pending_tenant_idx, keyed (tenant, id))
 * and none while it runs (migration 0026), so the waiting arm walks that
 * index and the claimed arm tasks_running_idx, each in id order.
 */
const pickedOf = (name: string, arm: string) => `${name} as (
     select t.id, t.status, t.tenant, t.concurrency_key from tasks t
     where ${MATCH_PREDICATES}
       and ${arm}
       and ($10::bigint is null or t.id > $10::bigint)
     order by t.id
     limit $3::int
     for update of t skip locked
   )`;

/**
 * Cancels up to `limit` of the tenant's matching tasks that have not started,
 * lowest id first, after `afterId` (progress within one bulk call). The guard
 * is DELETE /v1/tasks/{id}'s (tasks_cancel_if_not_started): waiting, or
 * claimed (even sent to the Queue with a delay) but not started; the
 * consumer's fenced start then skips it. Rows are locked with SKIP LOCKED,
 * so the statement never waits on (or deadlocks with) a consumer starting
 * the same tasks: a task being started is left alone, and FOR UPDATE
 * re-checks the guard on the latest row version of every task it takes.
 * Each arm takes up to `limit` unlocked tasks in id order, so the lowest
 * `limit` ids of both are the lowest of all: a batch comes back short only
 * when nothing more matches. (The other arm's excess stays locked to the
 * commit, unchanged.) A cancelled task is terminal, so a repeated call
 * never matches it again.
 */
const tasksCancelMatching = sql(
  'tasks_cancel_matching_if_not_started',
  `with clock as (select coalesce($1::timestamptz, now()) as now),
   ${pickedOf('waiting', WAITING)},
   ${pickedOf('claimed', CLAIMED_NOT_STARTED)},
   picked as (
     select * from waiting union all select * from claimed
     order by id
     limit $3::int
   ),
   cancelled as (
     update tasks t set status = 'cancelled', finished_at = clock.now, lease_expires_at = null, updated_at = clock.now
     from clock
     -- updates_by_id (tasks-shared.ts): by the ids alone (joined to picked
     -- beside them, a generic plan looked all of them up again for each).
     where t.id = any(array(select p.id from picked p))
     returning t.id, t.tenant
   ),
   ${countPendingOf('pending_counted', '-', 'cancelled')},
   -- A task claimed early gives its slot back (the status is the locked row's).
   ${freeSlotsOf(`(select p.tenant, p.concurrency_key from picked p join cancelled c on c.id = p.id where p.status = 'running')`)}
   select c.id from cancelled c cross join slots_freed`,
);

/** The ids cancelled, ascending. */
export async function cancelMatchingTasks(
  q: Queryable,
  p: { now?: Now; tenant: string; match: TaskMatch; afterId?: string | null; limit: number },
): Promise<string[]> {
  const rows = await q.query<{ id: string }>(tasksCancelMatching, [
    p.now ?? null,
    p.tenant,
    p.limit,
    ...matchParams(p.match),
    p.afterId ?? null,
  ]);
  return rows.map((r) => String(r.id)).sort((a, b) => (BigInt(a) < BigInt(b) ? -1 : 1));
}
