// What the task statements share: the clock-override convention, the
// column lists over the alias `t`, the "not started" predicate, the pending
// count step (countPendingOf) and the lost-fence report of the fenced batch
// writes.
//
// The task statements. Each is one round trip, whatever the batch size: a batch
// travels as parallel arrays (through unnest, or batchRows). Every parameter
// is cast; a statement that reads the clock takes the override as $1 (null:
// the database's now()), so tests travel in time and the database clock is the
// only clock in production. (The updated_at that a statement sets on a
// tenants, concurrency_slots or rate_limits row is the real now(): a record
// of the write, which no statement reads.) The reads (get, list, spent keys)
// take the tenant as $1.
//
// Every write about an attempt is guarded by id + lease epoch + status: a
// stale worker, a redelivered message or a retried statement changes nothing.
//
// The fenced batch writes (release, start, finish) name their rows by
// `t.id = any($2::bigint[])` beside the join on the batch's (id, epoch) pairs:
// the planner then looks each id up. Joined only through the unnest, it
// answered them by reading tasks_running_idx whole (its `status = 'running'`
// predicate matches theirs): 10,100 rows and ~20 ms per 100 with 10,000
// tasks in flight (`BENCH_RUNNING=10000 npm run bench:explain`). Their pairs
// come from batchRows, not unnest (below).
//
// updates_by_id: so do the updates of `tasks` that write a batch from a CTE
// (the plain claim, the promote, the reaper, the bulk cancel), by
// `t.id = any(array(select id from <cte>))`: beside the join where the update
// takes values from the CTE, alone where it takes none (beside a join it has
// no use for, a generic plan of the bulk cancel looked every id up again for
// each row). Joined to the CTE alone, a plan for its values over a table of
// 20,000 tasks hashed all of them to write a batch (the claim of 500: 5 of
// its 14 ms); over a larger table the planner looks the ids up either way.
// test/tasks/plans.test.ts reads each one's plans beside a backlog.
import { LIVE_STATUSES, TASK_COLUMNS, type TaskStatus } from './taskRows.ts';

export type Now = Date | null | undefined;
export const at = (now: Now) => now ?? null;

const TASK_COLUMN_NAMES = TASK_COLUMNS.split(',').map((c) => c.trim());
export const TASK_COLUMNS_T = TASK_COLUMN_NAMES.map((c) => `t.${c}`).join(', ');
// No batch write locks its rows in id order first any more (issue 12): the
// deadlock that lock prevented was the sweep's dispatch mark against a
// consumer's fenced start over the same tasks, and the mark no longer writes
// task rows (one dispatch_marks row per batch, migration 0015).

/**
 * Claimed by the look-ahead (or a due claim) but not started: for every user
 * action still a waiting task (DESIGN §5 "The look-ahead is invisible").
 * Over the row aliased `t`.
 */
export const CLAIMED_NOT_STARTED = `(t.status = 'running' and t.started_at is null)`;
/** Waiting: due later, or due and not claimed. Over `t`. */
export const WAITING = `t.status in ('scheduled', 'queued')`;
/** Has not started: waiting, or claimed early and not started. Over `t`. */
export const NOT_STARTED = `(${WAITING} or ${CLAIMED_NOT_STARTED})`;
/**
 * No handler of the task has ever started: no attempt of it in the history
 * has a start (a retry waiting has one; a claim given back or a dispatch
 * lost has none). Its idempotency key is spent once one has (README). Over
 * `t`; one probe of task_attempts_task_idx.
 */
export const NEVER_RAN = `not exists (select 1 from task_attempts a where a.task_id = t.id and a.started_at is not null)`;
/**
 * Live: waiting or running. Over `t`. With a schedule named, the predicate
 * of tasks_live_occurrences_idx (migration 0028); NOT_STARTED's `or` does
 * not imply it, so a read of a schedule's not-started occurrences says both.
 */
export const LIVE = `t.status in (${LIVE_STATUSES.map((s) => `'${s}'`).join(', ')})`;

/**
 * Keeps the tenants' pending counts (migration 0021; maxPendingTasks reads
 * them) by the rows of `rows` (column tenant, one row per task): CTE `name`
 * adds `sign` 1 per row to the tenant's shard of this backend. Every
 * statement that creates pending tasks or takes tasks out of pending (to a
 * terminal status, or deleted) includes it, over exactly those rows, once: a
 * second insert of one row in one statement fails. A data-modifying CTE: it
 * runs whether or not anything reads it.
 */
export const countPendingOf = (name: string, sign: '+' | '-', rows: string) => `${name} as (
     insert into tenant_pending_counts as c (tenant, shard, n)
     select r.tenant, pg_backend_pid() % 16, ${sign}count(*) from ${rows} r
     group by r.tenant
     order by r.tenant
     on conflict (tenant, shard) do update set n = c.n + excluded.n
   )`;

/**
 * The rows of a batch that travels as parallel arrays, one row per subscript
 * of the first: `batchRows([['id', '$2::bigint[]'], ['epoch', '$3::bigint[]']])`
 * (as unnest of them all, for arrays of one length).
 *
 * Not unnest, for the fenced batch writes. Once a pooled connection has run a
 * statement five times, Postgres plans it once for any parameters (a generic
 * plan). It then estimates unnest of a parameter at 10 rows, and
 * `t.id = any($2)` at 10 too, and joined the two by a nested loop that
 * rescans the batch for every task row: 9,900 comparisons per 100 tasks, 3.5
 * to 5 ms in each of the fenced start and finish, more than the rest of either
 * (issue 12). generate_subscripts is estimated at 1,000 rows, so the join is
 * hashed. The statements that read tasks by the batch's ids alone (the dispatch
 * mark) keep unnest: its low estimate is what makes them look each id up.
 */
export const batchRows = (columns: readonly (readonly [name: string, param: string])[]) =>
  `select ${columns.map(([name, param]) => `(${param})[b.i] as ${name}`).join(', ')}
     from generate_subscripts(${columns[0]![1]}, 1) as b(i)`;

/** A fenced write that found the task no longer held at the expected epoch. */
export interface LostFence {
  id: string;
  epoch: number;
  /** null: the task no longer exists. */
  currentEpoch: number | null;
  currentStatus: TaskStatus | null;
  /** Set when the write was refused rather than lost: the start of a task whose queue is paused. */
  reason?: 'queue_paused' | 'rate_limited';
}

export interface LostRow {
  id: string;
  epoch: string;
  current_epoch: string | null;
  current_status: TaskStatus | null;
}
export const lostFromRow = (r: LostRow): LostFence => ({
  id: String(r.id),
  epoch: Number(r.epoch),
  currentEpoch: r.current_epoch === null ? null : Number(r.current_epoch),
  currentStatus: r.current_status,
});
