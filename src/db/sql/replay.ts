// Replay (issue 15): terminal tasks become new tasks with the same type,
// payload, queue and options, `replay_of` naming the original, and no
// idempotency key. One statement per batch, whatever its size (the HTTP
// layer sends at most REPLAY_BATCH_SIZE originals per statement).
//
// The originals are terminal, hence immutable: they are read, never locked
// or written. What keeps a task from being replayed twice is the unique
// index of migration 0014 (tasks_replay_of_key): the NOT EXISTS below skips
// originals that already have a replay (so a repeated bulk call continues
// where the last one stopped, and its limit counts new replays only), and
// ON CONFLICT ... DO NOTHING settles two statements racing over one original.
//
// Quota (maxPendingTasks): every replay is a new pending task. The statement
// shares the enqueue's `pending_quota` step (pendingQuotaOf): the originals
// it would replay count as the tasks added, and over the limit the whole
// statement is refused (TQ002, 429 quota_exceeded).
import type { Queryable } from '../seam.ts';
import { sql } from '../seam.ts';
import { slotLimitsOf } from './concurrency.ts';
import { FAIR_VTIME_OF_INPUT, KNOWN_QUEUES_OF_INPUT, pendingQuotaOf } from './tasks-enqueue.ts';
import { countPendingOf } from './tasks-shared.ts';
import { shownStatusSql, TASK_COLUMNS, TASK_COLUMNS_SHOWN, TERMINAL_STATUSES, taskFromRow, type Task, type TaskRow } from './taskRows.ts';

type Now = Date | null | undefined;

const TASK_COLUMNS_T = TASK_COLUMNS.split(',')
  .map((c) => `t.${c.trim()}`)
  .join(', ');

/** Most originals one replay or bulk-cancel statement handles; larger limits take several. */
export const BULK_BATCH_SIZE = 1000;

/** Statuses a replay starts from. */
export const REPLAYABLE_STATUSES = TERMINAL_STATUSES;

export interface TaskMatch {
  /** Only these ids (still scoped by tenant and the other fields). */
  ids?: readonly string[];
  queue?: string;
  statuses?: readonly string[];
  task?: string;
  createdAfter?: Date;
  createdBefore?: Date;
}

/** The filter's parameters, in the order both bulk statements take them ($4-$9). */
export function matchParams(m: TaskMatch): unknown[] {
  return [
    m.ids && m.ids.length > 0 ? m.ids : null,
    m.queue ?? null,
    m.statuses && m.statuses.length > 0 ? m.statuses : null,
    m.task ?? null,
    m.createdAfter ?? null,
    m.createdBefore ?? null,
  ];
}

/**
 * The filter's predicates over alias `t`, for $2 (tenant) and $4-$9
 * (matchParams). The status is the one the list shows (a task claimed early
 * and not started is `queued`), so a bulk cancel of `queued` takes what the
 * list calls queued.
 */
export const MATCH_PREDICATES = `t.tenant = $2::text
     and ($4::bigint[] is null or t.id = any($4::bigint[]))
     and ($5::text is null or t.queue = $5::text)
     and ($6::text[] is null or ${shownStatusSql('t.')} = any($6::text[]))
     and ($7::text is null or t.task = $7::text)
     and ($8::timestamptz is null or t.created_at >= $8::timestamptz)
     and ($9::timestamptz is null or t.created_at < $9::timestamptz)`;

/**
 * Replays a tenant's terminal tasks matching the filter, lowest id first,
 * after `afterId` (progress within one bulk call), at most `limit`.
 * Locks nothing but the tenant's fair-queuing rows; guards: the tenant, the
 * terminal status, no replay yet (NOT EXISTS, and the unique index on
 * conflict), the tenant's maxPendingTasks (`pending_quota`). A replay due within the look-ahead is born `queued` with its
 * vtime, otherwise `scheduled`, exactly like an enqueue.
 */
const tasksReplayTerminal = sql(
  'tasks_replay_terminal',
  `with clock as (select coalesce($1::timestamptz, now()) as now),
   originals as (
     select t.id, t.queue, t.task, t.payload, t.max_attempts, t.backoff_base_ms, t.backoff_max_ms,
             t.timeout_ms, t.delivery, t.concurrency_key, t.concurrency_limit, t.priority, t.callback,
             t.rate_key, t.rate_limit, t.rate_period_seconds
     from tasks t
     where ${MATCH_PREDICATES}
       and t.status in ('succeeded', 'dead', 'cancelled', 'missed')
       and ($10::bigint is null or t.id > $10::bigint)
       and not exists (select 1 from tasks r where r.replay_of = t.id)
     order by t.id
     limit $11::int
   ),
   ${pendingQuotaOf('$14::int', '(select count(*) from originals)')},
   input as (
     select o.*, $2::text as tenant, o.id as ord, d.due_at, d.due_at <= clock.now + make_interval(secs => $3::int) as runnable
     from originals o, clock, pending_quota,
          lateral (select coalesce($12::timestamptz, clock.now + coalesce($13::bigint, 0) * interval '1 millisecond') as due_at) d
     where pending_quota.ok
   ),
   ${KNOWN_QUEUES_OF_INPUT},
   ${FAIR_VTIME_OF_INPUT},
   written as (
     insert into tasks as t (tenant, queue, task, payload, status, run_at, max_attempts, backoff_base_ms,
                             backoff_max_ms, timeout_ms, delivery, vtime, replay_of, created_at, updated_at,
                             concurrency_key, concurrency_limit, priority, callback, rate_key, rate_limit, rate_period_seconds)
     select $2::text, r.queue, r.task, r.payload, case when r.runnable then 'queued' else 'scheduled' end,
            r.due_at, r.max_attempts, r.backoff_base_ms, r.backoff_max_ms, r.timeout_ms, r.delivery,
            r.vtime, r.id, clock.now, clock.now, r.concurrency_key, r.concurrency_limit, r.priority, r.callback,
            r.rate_key, r.rate_limit, r.rate_period_seconds
     from rows r, clock
     order by r.id
     on conflict (replay_of) where replay_of is not null do nothing
     returning ${TASK_COLUMNS_T}
   ),
   ${slotLimitsOf('(select w.tenant, w.concurrency_key as key, w.concurrency_limit as max_running, w.id as ord from written w)')},
   ${countPendingOf('pending_counted', '+', 'written')}
   select * from written`,
);

export async function replayTerminalTasks(
  q: Queryable,
  p: {
    now?: Now;
    tenant: string;
    lookaheadSeconds: number;
    match: TaskMatch;
    afterId?: string | null;
    limit: number;
    runAt?: Date | null;
    delayMs?: number | null;
    /** The default maxPendingTasks (vars); the tenant's own quota overrides it. */
    maxPendingTasks: number;
  },
): Promise<Task[]> {
  const rows = await q.query<TaskRow>(tasksReplayTerminal, [
    p.now ?? null,
    p.tenant,
    p.lookaheadSeconds,
    ...matchParams(p.match),
    p.afterId ?? null,
    p.limit,
    p.runAt ?? null,
    p.delayMs ?? null,
    p.maxPendingTasks,
  ]);
  return rows.map(taskFromRow).sort((a, b) => (BigInt(a.replayOf!) < BigInt(b.replayOf!) ? -1 : 1));
}

const tasksGetReplayOf = sql(
  'tasks_get_replay_of',
  `select ${TASK_COLUMNS_SHOWN} from tasks where tenant = $1::text and replay_of = $2::bigint`,
);

/** The replay of a task, if it has one (scoped by tenant). */
export async function getReplayOf(q: Queryable, tenant: string, id: string): Promise<Task | null> {
  const rows = await q.query<TaskRow>(tasksGetReplayOf, [tenant, id]);
  return rows[0] ? taskFromRow(rows[0]) : null;
}
