// Enqueue: the batch insert of one tenant's tasks, and the steps every
// statement that creates tasks shares (queue registration, fair vtimes, the
// pending quota). Conventions: tasks-shared.ts.
import type { TraceContext } from '../../tracing/trace-context.ts';
import type { Queryable } from '../seam.ts';
import { sql } from '../seam.ts';
import { parkedIfKeyFull, slotLimitsOf } from './concurrency.ts';
import { taskFromRow, type Delivery, type Task, type TaskCallback, type TaskRow, type TaskStatus } from './taskRows.ts';
import { at, CLAIMED_NOT_STARTED, countPendingOf, NEVER_RAN, NOT_STARTED, TASK_COLUMNS_T, type Now } from './tasks-shared.ts';

export interface NewTask {
  queue: string;
  task: string;
  payload: unknown;
  /** An absolute run time, or null to run `delayMs` after the database's now. */
  runAt: Date | null;
  delayMs: number | null;
  maxAttempts: number;
  backoffBaseMs: number;
  backoffMaxMs: number;
  timeoutMs: number;
  delivery: Delivery;
  idempotencyKey: string | null;
  /** Flow control (issue 16): at most `concurrencyLimit` running tasks of this tenant with this key. */
  concurrencyKey: string | null;
  concurrencyLimit: number | null;
  /** Rate limit (issue 16): at most `rateLimit` starts per `ratePeriodSeconds` of this tenant's tasks with this key. */
  rateKey: string | null;
  rateLimit: number | null;
  ratePeriodSeconds: number | null;
  /** -10..10: which of the tenant's tasks fills its fair share first. */
  priority: number;
  /** Completion callback (issue 15), or null. */
  callback: TaskCallback | null;
}

export interface WrittenTask {
  task: Task;
  /** true: inserted now; false: an existing task with the same idempotency key. */
  created: boolean;
  /** An existing task that had not started and never ran, rescheduled by this enqueue (false: deduplicated). */
  rescheduled: boolean;
}

/**
 * Inserts a batch of one tenant's tasks. Tasks due within the look-ahead are
 * born `queued` with their fair-queuing vtime: per queue, the tenant's row is
 * advanced once for the whole batch (`max(last_vtime, queue clock) + n/weight`)
 * and the batch's tasks take the steps in input order. Only this tenant's row
 * is written, so tenants never serialize on each other; rows are locked in
 * (queue, tenant) order everywhere, so statements cannot deadlock on them.
 *
 * An existing idempotency key is resolved by ON CONFLICT on the row itself:
 * a task that has not started takes the new run time and payload; a spent one
 * (started or finished) is returned unchanged. "Not started" includes a task
 * the look-ahead claimed early and sent with a delay (DESIGN §5, issue 11):
 * its claim is undone (epoch bumped, so the message in flight is skipped as
 * stale; the attempt counted at the claim refunded) and it waits again. The
 * key is spent only once the fenced start has run. A key held by another
 * task type or queue refuses the whole statement (TQ003). Keys whose
 * task retention already deleted are left out here (the caller reads them from
 * spent_idempotency_keys); the trigger of migration 0002 closes the race with
 * a purge committing meanwhile.
 *
 * Quota (maxPendingTasks, guard `pending_quota`): the tenant's pending tasks
 * (the sum of its pending counts, migration 0021: at most 16 rows) against
 * the tasks the batch would create (a key the tenant already holds only
 * reschedules or deduplicates); the batch adds the tasks it created to the
 * count. Over the limit, tasks_refuse_over_pending_quota raises TQ002 and the
 * whole batch is refused. It reads without locking: concurrent enqueues of
 * one tenant do not see each other's uncommitted counts, so together they may
 * overshoot the limit by at most what all but one of them add (README,
 * Quotas).
 *
 * Concurrency keys (issue 16, guard `slot_limits`): the batch writes each
 * key's limit to its concurrency_slots row (the last item of the batch with
 * that key wins, and a later enqueue overrides an earlier one: the most
 * recent task's limit applies). It locks those slot rows, in (tenant, key)
 * order like every statement that takes them.
 */
/**
 * Registers the queues of CTE `input` (column `queue`). Only names not seen
 * yet: ON CONFLICT on an existing row waits for any transaction updating it
 * (a claim advancing vclock), which made every enqueue queue behind in-flight
 * claims; a plain read does not wait. Used by every statement that creates
 * tasks (enqueue, replay, trigger).
 */
export const KNOWN_QUEUES_OF_INPUT = `known_queues as (
     insert into queues (name)
     select distinct i.queue from input i
     where not exists (select 1 from queues q where q.name = i.queue)
     order by i.queue
     on conflict do nothing
   )`;

/**
 * Fair-queuing vtimes for the runnable rows of CTE `input` (columns queue,
 * tenant, runnable, ord): per (queue, tenant), the tenant's row is advanced
 * once for the whole statement (`max(last_vtime, queue clock) + n/weight`)
 * and the rows take the steps in `ord` order. CTE `rows` is input's columns
 * plus vtime. Rows are written in (queue, tenant) order, like every statement
 * that writes them, so statements cannot deadlock on them. Shared by every
 * statement that makes tasks runnable: enqueue, replay, trigger and promote.
 */
export const FAIR_VTIME_OF_INPUT = `runnable_counts as (
     select queue, tenant, count(*)::double precision as n from input where runnable group by queue, tenant
   ),
   fair as (
     insert into tenants as t (queue, tenant, last_vtime)
     select c.queue, c.tenant, coalesce(q.vclock, 0) + c.n
     from runnable_counts c left join queues q on q.name = c.queue
     order by c.queue, c.tenant
     on conflict (queue, tenant) do update set
       last_vtime = greatest(t.last_vtime, coalesce((select q.vclock from queues q where q.name = t.queue), 0))
                    + (select c.n from runnable_counts c where c.queue = t.queue and c.tenant = t.tenant) / t.weight,
       updated_at = now()
     returning t.queue, t.tenant, t.last_vtime, t.weight
   ),
   rows as (
     select i.*,
            case when i.runnable then
              f.last_vtime - (c.n - row_number() over (partition by i.queue, i.tenant, i.runnable order by i.ord)) / f.weight
            end as vtime
     from input i
     left join fair f on i.runnable and f.queue = i.queue and f.tenant = i.tenant
     left join runnable_counts c on i.runnable and c.queue = i.queue and c.tenant = i.tenant
   )`;

/**
 * The maxPendingTasks step of every statement that creates tasks (enqueue,
 * replay, trigger): CTEs `quota` and `pending_quota` for the tenant $2.
 * `defaultMax` is the parameter holding the default from vars; `adding` an
 * expression counting the tasks the statement would create. The statement
 * must read `pending_quota.ok` before it inserts (a CTE nobody reads never
 * runs): over the limit, tasks_refuse_over_pending_quota raises TQ002 and the
 * whole statement is refused (429 quota_exceeded). The tenant's pending tasks
 * are the sum of its pending counts (migration 0021): a constant cost, however
 * many it holds. The statement adds what it creates (countPendingOf).
 */
export const pendingQuotaOf = (defaultMax: string, adding: string) => `quota as (
     select coalesce((select max_pending_tasks from tenant_quotas where tenant = $2::text), ${defaultMax}) as max_pending
   ),
   pending_quota as (
     select tasks_refuse_over_pending_quota(
              $2::text,
              (select coalesce(sum(c.n), 0) from tenant_pending_counts c where c.tenant = $2::text)::bigint,
              ${adding},
              (select max_pending from quota)) as ok
   )`;

/**
 * The statement shared by both enqueue statements, around the insert's
 * conflict clause and RETURNING list (`tail`, which must return `created`).
 * `keyed`: some item may carry an idempotency key. Without, the statement
 * leaves out the two reads only a key can change (a key already
 * held adds nothing to the quota; a spent key creates nothing): every item is
 * a new task. They were a fifth of a single enqueue's time on a new
 * connection, where each statement is planned afresh (1.75 -> 1.40 ms).
 */
const insertBatch = (keyed: boolean, tail: string) => `with clock as (select coalesce($1::timestamptz, now()) as now),
   ${pendingQuotaOf(
     '$15::int',
     keyed
       ? `(select count(*) from unnest($14::text[]) k(key)
               where k.key is null
                  or not exists (select 1 from tasks e where e.tenant = $2::text and e.idempotency_key = k.key))`
       : `cardinality($4::text[])`,
   )},
   input as (
     select i.*, $2::text as tenant, d.due_at, d.due_at <= clock.now + make_interval(secs => $3::int) as runnable
     from unnest($4::text[], $5::text[], $6::jsonb[], $7::timestamptz[], $8::bigint[], $9::int[], $10::int[],
                 $11::int[], $12::int[], $13::text[], $14::text[], $18::text[], $19::int[], $20::int[], $21::jsonb[],
                 $22::text[], $23::int[], $24::int[])
          with ordinality as i(queue, task, payload, run_at, delay_ms, max_attempts, backoff_base_ms,
                               backoff_max_ms, timeout_ms, delivery, idempotency_key, concurrency_key,
                               concurrency_limit, priority, callback, rate_key, rate_limit, rate_period_seconds, ord),
          clock, pending_quota,
          lateral (select coalesce(i.run_at, clock.now + coalesce(i.delay_ms, 0) * interval '1 millisecond') as due_at) d
     where pending_quota.ok${
       keyed
         ? ` and not exists (select 1 from spent_idempotency_keys s
                       where s.tenant = $2::text and s.idempotency_key = i.idempotency_key)`
         : ''
     }
   ),
   ${KNOWN_QUEUES_OF_INPUT},
   ${slotLimitsOf('(select $2::text as tenant, i.concurrency_key as key, i.concurrency_limit as max_running, i.ord from input i)')},
   ${FAIR_VTIME_OF_INPUT},
   written as (
     insert into tasks as t (tenant, queue, task, payload, status, run_at, max_attempts, backoff_base_ms,
                             backoff_max_ms, timeout_ms, delivery, idempotency_key, vtime, created_at, updated_at,
                             traceparent, tracestate, concurrency_key, concurrency_limit, priority, callback,
                             rate_key, rate_limit, rate_period_seconds, parked)
     select $2::text, r.queue, r.task, r.payload, case when r.runnable then 'queued' else 'scheduled' end,
            r.due_at, r.max_attempts, r.backoff_base_ms, r.backoff_max_ms, r.timeout_ms, r.delivery,
            r.idempotency_key, r.vtime, clock.now, clock.now, $16::text, $17::text,
            r.concurrency_key, r.concurrency_limit, r.priority, r.callback, r.rate_key, r.rate_limit, r.rate_period_seconds,
            ${parkedIfKeyFull('r.runnable', '$2::text', 'r.concurrency_key')}
     from rows r, clock
     order by r.ord
     ${tail}
   ),
   -- Only the tasks created are new pending work (a key held reschedules or deduplicates).
   ${countPendingOf('pending_counted', '+', '(select $2::text as tenant from written w where w.created)')}
   select * from written`;

/**
 * A key held by a task that has not started and never ran: the enqueue
 * reschedules it (key_spent_once_ran). A retry waiting ran once: its key is
 * spent, the enqueue changes nothing and answers deduplicated. As
 * NOT_STARTED alone, a second enqueue with the key replaced the payload and
 * run time of a task between its retries.
 */
const KEY_HELD = `(${NOT_STARTED} and ${NEVER_RAN})`;
const CLAIM_UNDONE = `(${CLAIMED_NOT_STARTED} and ${NEVER_RAN})`;

const tasksInsertBatch = sql(
  'tasks_insert_batch',
  insertBatch(true, `on conflict (tenant, idempotency_key) where idempotency_key is not null do update set
     -- Guard: the key's task type and queue never change (TQ003, 409, the whole batch refused).
     task       = tasks_keep_task_type_of_key(t.idempotency_key, t.task, t.queue, excluded.task, excluded.queue),
     payload    = case when ${KEY_HELD} then excluded.payload else t.payload end,
     run_at     = case when ${KEY_HELD} then excluded.run_at else t.run_at end,
     vtime      = case when not ${KEY_HELD} then t.vtime
                       when excluded.status = 'queued' then coalesce(t.vtime, excluded.vtime) end,
     status     = case when ${KEY_HELD} then excluded.status else t.status end,
     -- A waiting task takes the new flow control and is runnable again.
     concurrency_key   = case when ${KEY_HELD} then excluded.concurrency_key else t.concurrency_key end,
     concurrency_limit = case when ${KEY_HELD} then excluded.concurrency_limit else t.concurrency_limit end,
     priority   = case when ${KEY_HELD} then excluded.priority else t.priority end,
     rate_key   = case when ${KEY_HELD} then excluded.rate_key else t.rate_key end,
     rate_limit = case when ${KEY_HELD} then excluded.rate_limit else t.rate_limit end,
     rate_period_seconds = case when ${KEY_HELD} then excluded.rate_period_seconds else t.rate_period_seconds end,
     -- An early claim undone gives its old key's slot back, here, where \`t\`
     -- is the locked row as it was (the call returns the slots freed: the
     -- task is not parked). The wake spares the tasks of the batch's keys.
     parked     = case when ${CLAIM_UNDONE} and t.concurrency_key is not null
                       then concurrency_slots_free(t.tenant, t.concurrency_key, 1, $14::text[]) = 0
                       when ${KEY_HELD} then false else t.parked end,
     -- reschedule_if_claimed_not_started: undo the early claim.
     lease_epoch      = case when ${CLAIM_UNDONE} then t.lease_epoch + 1 else t.lease_epoch end,
     attempts         = case when ${CLAIM_UNDONE} then t.attempts - 1 else t.attempts end,
     lease_expires_at = case when ${CLAIM_UNDONE} then null else t.lease_expires_at end,
     dispatched_at    = case when ${CLAIM_UNDONE} then null else t.dispatched_at end,
     updated_at = case when ${KEY_HELD} then excluded.updated_at else t.updated_at end
   -- A created row's payload is the caller's own: sending 1,000 of them back
   -- cost about a third of the statement, so only existing rows return it.
   returning ${TASK_COLUMNS_T.replace('t.payload', 'case when t.xmax = 0 then null else t.payload end as payload')},
             (t.xmax = 0) as created,
             -- Whether the key still reschedules (the row as written: not started, never ran).
             (t.xmax = 0 or ${KEY_HELD}) as reschedulable`),
);

/**
 * The same insert when no item carries an idempotency key: no ON CONFLICT
 * (no speculative insertion), and it returns only what the input does not
 * say (id, status, run time, creation time); insertTasks builds the answers
 * from the input. Same locks and guards as tasks_insert_batch (the quota,
 * which counts every item: none can be a key already held).
 */
const tasksInsertBatchPlain = sql(
  'tasks_insert_batch_plain',
  insertBatch(false, 'returning t.id, t.status, t.run_at, t.created_at, true as created'),
);

/** One result per input, in input order; null where the key was spent and its task already purged. */
export async function insertTasks(
  q: Queryable,
  p: {
    now?: Now;
    tenant: string;
    lookaheadSeconds: number;
    tasks: readonly NewTask[];
    maxPendingTasks: number;
    trace?: TraceContext | null;
  },
): Promise<(WrittenTask | null)[]> {
  const col = <K extends keyof NewTask>(k: K) => p.tasks.map((t) => t[k]);
  const plain = p.tasks.every((t) => t.idempotencyKey === null);
  const rows = await q.query<TaskRow & { created: boolean; reschedulable?: boolean }>(plain ? tasksInsertBatchPlain : tasksInsertBatch, [
    at(p.now),
    p.tenant,
    p.lookaheadSeconds,
    col('queue'),
    col('task'),
    p.tasks.map((t) => JSON.stringify(t.payload ?? null)),
    col('runAt'),
    col('delayMs'),
    col('maxAttempts'),
    col('backoffBaseMs'),
    col('backoffMaxMs'),
    col('timeoutMs'),
    col('delivery'),
    col('idempotencyKey'),
    p.maxPendingTasks,
    p.trace?.traceparent ?? null,
    p.trace?.tracestate ?? null,
    col('concurrencyKey'),
    col('concurrencyLimit'),
    col('priority'),
    p.tasks.map((t) => (t.callback ? JSON.stringify(t.callback) : null)),
    col('rateKey'),
    col('rateLimit'),
    col('ratePeriodSeconds'),
  ]);
  if (plain) {
    // Inserted in input order, so the ids ascend in that order.
    const sorted = rows.sort((a, b) => Number(BigInt(a.id) - BigInt(b.id)));
    if (sorted.length !== p.tasks.length) throw new Error(`enqueue: ${sorted.length} rows inserted for ${p.tasks.length} tasks`);
    return p.tasks.map((input, i) => {
      const r = sorted[i]!;
      return {
        task: taskFromRow({
          id: r.id,
          tenant: p.tenant,
          queue: input.queue,
          task: input.task,
          payload: input.payload,
          status: r.status,
          run_at: r.run_at,
          created_at: r.created_at,
          updated_at: r.created_at,
          dispatched_at: null,
          started_at: null,
          finished_at: null,
          attempts: 0,
          max_attempts: input.maxAttempts,
          last_error: null,
          backoff_base_ms: input.backoffBaseMs,
          backoff_max_ms: input.backoffMaxMs,
          timeout_ms: input.timeoutMs,
          delivery: input.delivery,
          lease_epoch: '0',
          idempotency_key: null,
          schedule_id: null,
          scheduled_for: null,
          replay_of: null,
          concurrency_key: input.concurrencyKey,
          concurrency_limit: input.concurrencyLimit,
          priority: input.priority,
          callback: input.callback,
          rate_key: input.rateKey,
          rate_limit: input.rateLimit,
          rate_period_seconds: input.ratePeriodSeconds,
        }),
        created: true,
        rescheduled: false,
      };
    });
  }
  // Back to input order: keyed rows by key; unkeyed ones were inserted in
  // input order, so their ids ascend in that order.
  const byKey = new Map(rows.filter((r) => r.idempotency_key !== null).map((r) => [r.idempotency_key!, r]));
  const unkeyed = rows.filter((r) => r.idempotency_key === null).sort((a, b) => Number(BigInt(a.id) - BigInt(b.id)));
  let next = 0;
  return p.tasks.map((input) => {
    const r = input.idempotencyKey === null ? unkeyed[next++] : byKey.get(input.idempotencyKey);
    if (!r) return null;
    return {
      task: taskFromRow(r.created ? { ...r, payload: input.payload } : r),
      created: r.created,
      rescheduled: !r.created && r.reschedulable === true,
    };
  });
}

export interface SpentKey {
  idempotencyKey: string;
  taskId: string;
  status: TaskStatus;
  spentAt: Date;
}

const spentKeysFind = sql(
  'spent_idempotency_keys_find',
  `select idempotency_key, task_id, status, spent_at from spent_idempotency_keys
   where tenant = $1::text and idempotency_key = any($2::text[])`,
);

export async function findSpentKeys(q: Queryable, tenant: string, keys: readonly string[]): Promise<SpentKey[]> {
  const rows = await q.query<{ idempotency_key: string; task_id: string; status: TaskStatus; spent_at: Date }>(
    spentKeysFind,
    [tenant, keys],
  );
  return rows.map((r) => ({ idempotencyKey: r.idempotency_key, taskId: String(r.task_id), status: r.status, spentAt: r.spent_at }));
}
