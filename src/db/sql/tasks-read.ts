// Reads and the cancel, always scoped by tenant ($1). Conventions:
// tasks-shared.ts.
import type { Queryable } from '../seam.ts';
import { sql } from '../seam.ts';
import { shownStatusSql, TASK_COLUMNS, TASK_COLUMNS_SHOWN, TERMINAL_STATUSES, taskFromRow, type Task, type TaskRow } from './taskRows.ts';
import { freeSlotsOf } from './concurrency.ts';
import { at, countPendingOf, NOT_STARTED, TASK_COLUMNS_T, type Now } from './tasks-shared.ts';

// Reads and cancel, always scoped by tenant

const tasksGet = sql('tasks_get', `select ${TASK_COLUMNS_SHOWN} from tasks where tenant = $1::text and id = $2::bigint`);

export async function getTask(q: Queryable, tenant: string, id: string): Promise<Task | null> {
  const rows = await q.query<TaskRow>(tasksGet, [tenant, id]);
  return rows[0] ? taskFromRow(rows[0]) : null;
}

const tasksGetByKey = sql(
  'tasks_get_by_key',
  `select ${TASK_COLUMNS_SHOWN} from tasks where tenant = $1::text and idempotency_key = $2::text`,
);

export async function getTaskByKey(q: Queryable, tenant: string, key: string): Promise<Task | null> {
  const rows = await q.query<TaskRow>(tasksGetByKey, [tenant, key]);
  return rows[0] ? taskFromRow(rows[0]) : null;
}

/**
 * Cancels a task that has not started: waiting, or claimed (even handed to
 * the Queue with a delay) but not yet started; the consumer's fenced start
 * then skips it. Addressed by id or by idempotency key.
 */
const tasksCancelIfNotStarted = sql(
  'tasks_cancel_if_not_started',
  `with target as (
     -- Locked first, so the status read is the one the cancel replaces.
     select t.id, t.status, t.tenant, t.concurrency_key from tasks t
     where t.tenant = $2::text
       and t.id = coalesce($3::bigint, (select id from tasks where tenant = $2::text and idempotency_key = $4::text))
       and ${NOT_STARTED}
     for update of t
   ),
   cancelled as (
     update tasks t set status = 'cancelled', finished_at = coalesce($1::timestamptz, now()),
                        lease_expires_at = null, updated_at = coalesce($1::timestamptz, now())
     from target x
     where t.id = x.id
     returning ${TASK_COLUMNS_T}
   ),
   ${countPendingOf('pending_counted', '-', 'cancelled')},
   -- A task claimed early gives its slot back.
   ${freeSlotsOf(`(select x.tenant, x.concurrency_key from target x join cancelled c on c.id = x.id where x.status = 'running')`)}
   select c.* from cancelled c cross join slots_freed`,
);

export async function cancelTaskIfNotStarted(
  q: Queryable,
  p: { now?: Now; tenant: string; id?: string; idempotencyKey?: string },
): Promise<Task | null> {
  const rows = await q.query<TaskRow>(tasksCancelIfNotStarted, [at(p.now), p.tenant, p.id ?? null, p.idempotencyKey ?? null]);
  return rows[0] ? taskFromRow(rows[0]) : null;
}

export interface TaskFilter {
  queue?: string;
  statuses?: readonly string[];
  task?: string;
  createdAfter?: Date;
  createdBefore?: Date;
  /** Keyset cursor: only ids below this one (newest first). */
  beforeId?: string;
  limit: number;
}

/**
 * One arm of the task list: the tenant's tasks whose stored status is in
 * `statuses`, newest first, up to $8. The status filter matches the status
 * as shown (a task claimed early but not started is `queued`); an arm
 * whose statuses it cannot show is not read at all (a one-time filter on
 * $3 alone). The arms with a tenant index name the tenant as an array
 * (list_in_tenant_order, on tasksListForTenant); the running arm, which has
 * none, as a plain comparison.
 */
const listArm = (statuses: readonly string[]) => {
  const list = (xs: readonly string[]) => xs.map((x) => `'${x}'`).join(', ');
  const shown = statuses.flatMap((s) => (s === 'running' ? ['queued', 'running'] : [s]));
  const tenantIs = statuses.includes('running') ? 'tenant = $1::text' : 'tenant = any(array[$1::text])';
  // list_status_by_column: but for a running task, the status shown is the
  // one stored; compared on the column, not the shown status, the planner
  // reads the column's statistics instead of guessing 0.5%, a guess that
  // made a big tenant's `succeeded` list a few rows to it: it read every
  // finished task by tasks_finished_idx and sorted them (30,000 rows for a
  // page of 50 in test/tasks/list-plans.test.ts).
  const statusIs = statuses.includes('running') ? shownStatusSql() : 'status';
  return `(select ${TASK_COLUMNS_SHOWN} from tasks
     where status in (${list(statuses)})
       and ${tenantIs}
       and ($3::text[] is null or $3::text[] && array[${list(shown)}])
       and ($2::text is null or queue = $2::text)
       and ($3::text[] is null or ${statusIs} = any($3::text[]))
       and ($4::text is null or task = $4::text)
       and ($5::timestamptz is null or created_at >= $5::timestamptz)
       and ($6::timestamptz is null or created_at < $6::timestamptz)
       -- cursor_in_index: a bound always (no cursor: past every id), so the
       -- cursor is the index's condition in a generic plan too; as
       -- \`$7 is null or id < $7\` it was a filter, and a page read every page above it.
       and id < coalesce($7::bigint, 9223372036854775807)
     order by tenant desc, id desc
     limit $8::int)`;
};

/**
 * A tenant's tasks, newest first, by keyset (id below the cursor) so a page
 * costs the same however deep it is. A task has a tenant index entry while
 * it waits and once it has finished, none while it runs (migration 0026):
 * the list merges three arms newest first, the finished tasks
 * (tasks_finished_tenant_idx backwards), the waiting ones
 * (tasks_pending_tenant_idx backwards) and the running ones
 * (tasks_running_idx backwards: every task in flight, the tenant's kept),
 * each stopping at the page's size.
 *
 * list_in_tenant_order: the finished and waiting arms compare the tenant as
 * `tenant = any(array[$1])` and every arm, and the merge, is ordered by
 * (tenant, id) desc: the same order, there being one tenant, but one the
 * primary key cannot give. Compared with `=`, the tenant is a constant to
 * the planner, `order by id desc` alone is asked for, and a custom plan
 * (every new Worker connection's) for a big tenant walks tasks_pkey
 * backwards, taking the tenant's rows as spread evenly over ids; for a
 * tenant gone quiet, older than everyone else's newer tasks, it reads all
 * of those (audit, PostgreSQL 15: 322,197 rows removed, 215 ms cold, 37 ms
 * warm; the generic plan 3.6 ms), and the waiting arm the same for a backlog
 * older than the others' (test/tasks/list-plans.test.ts, 53,000 tasks:
 * 40,050-53,000 rows an arm for a page of 50, now 50). `tenant = (select
 * $1::text)` is no cure: it plans every tenant as the average one, so with
 * few tenants it still walks the key (and the generic plan of a small
 * tenant too), with many it reads a big tenant whole by bitmap and sorts
 * it. The merge is in that order too, so a generic plan, whose estimates are
 * a few rows, still merges arms that stop at the page rather than reading
 * and sorting the tenant's history: PostgreSQL 15's planner does (the list
 * plans test goes red there without it, in CI's run on the machine's
 * server), 18's does not, so no mutant guards it (the mutants run on 18).
 */
const tasksListForTenant = sql(
  'tasks_list_for_tenant',
  `select * from (
     ${listArm(TERMINAL_STATUSES)}
     union all
     ${listArm(['scheduled', 'queued'])}
     union all
     ${listArm(['running'])}
   ) t
   order by tenant desc, id desc
   limit $8::int`,
);

export async function listTasks(q: Queryable, tenant: string, f: TaskFilter): Promise<Task[]> {
  const rows = await q.query<TaskRow>(tasksListForTenant, [
    tenant,
    f.queue ?? null,
    f.statuses && f.statuses.length > 0 ? f.statuses : null,
    f.task ?? null,
    f.createdAfter ?? null,
    f.createdBefore ?? null,
    f.beforeId ?? null,
    f.limit,
  ]);
  return rows.map(taskFromRow);
}
