// The consumer's fenced writes: start, finish and the lease heartbeat, each
// guarded by id + lease epoch + status. Conventions: tasks-shared.ts.
import type { TraceContext } from '../../tracing/trace-context.ts';
import type { Queryable } from '../seam.ts';
import { sql } from '../seam.ts';
import type { Task, TaskRow, TaskStatus } from './taskRows.ts';
import { freeSlotsOf } from './concurrency.ts';
import {
  at,
  batchRows,
  countPendingOf,
  lostFromRow,
  type LostFence,
  type LostRow,
  type Now,
} from './tasks-shared.ts';

/**
 * The fenced start lets a rate-limited task wait this long for its key's
 * line (a late message meeting the next one on time); one pushed further goes
 * back to its queue, attempt refunded. Below MAX_EARLY_WAIT_SECONDS (tasks/options.ts), so the
 * consumer's wait is never cut short.
 */
const RATE_LIMIT_START_WAIT_SECONDS = 10;

/** What the consumer runs a started task with: the handler's context, its timeout, the finish's fence. */
export type StartedTaskFields = Pick<
  Task,
  'id' | 'tenant' | 'queue' | 'task' | 'payload' | 'attempts' | 'maxAttempts' | 'timeoutMs' | 'epoch' | 'callbackOf'
>;

export interface StartedTask {
  task: StartedTaskFields;
  /** The W3C trace context of the request that enqueued it, if it had one. */
  trace: TraceContext | null;
  /** Milliseconds until its start: above 0 only for a rate-limited task given a later place on its key's line. */
  waitMs: number;
}

/** A matching message that arrived before its task's run_at: not started, to be started after `waitMs`. */
export interface EarlyTask {
  id: string;
  epoch: number;
  /** Milliseconds until run_at on the database clock. */
  waitMs: number;
  /** It has a rate limit (its start once due takes the whole statement). */
  rated: boolean;
}

/** The hand-off's time, from the batch's dispatch mark (now if the sweep died before writing it). */
const DISPATCHED_AT = `coalesce(t.dispatched_at,
                                (select d.dispatched_at from dispatch_marks d where d.claim_token = t.claim_token),
                                clock.now)`;
/**
 * refuse_if_queue_paused, asked once per statement (guard
 * `paused_asked_once`): with no queue paused, as almost always, the
 * statement reads no queue row per task. Uncorrelated, it is a one-time
 * filter: the refusal's update never runs, and the starts' per-task check
 * of their queue's flag is never evaluated (9,123 -> 5,663 buffers and
 * 7.1-7.5 -> 5.7-6.3 ms for a start of 500, PostgreSQL 15). With any queue
 * paused, each task's own queue is read as before. The same snapshot as
 * the per-task reads, so each task still takes exactly one branch.
 */
const NO_QUEUE_PAUSED = `(select true from queues p where p.paused limit 1) is null`;
/**
 * started_returns_what_runs_it: the started rows carry the columns of
 * StartedTaskFields (and rate_key, for the statement's own `rated`), not the
 * whole task. The whole row was 37 columns, seven of them timestamps, for
 * every task of every batch: formatting them cost Postgres and parsing them
 * cost the consumer (BENCHMARKS.md, issue 12, sixteenth pass).
 */
const STARTED_TASK_COLUMNS = ['id', 'tenant', 'queue', 'task', 'payload', 'attempts', 'max_attempts', 'timeout_ms', 'lease_epoch', 'callback_of', 'rate_key'];
const STARTED_NULLS_BUT_ID = STARTED_TASK_COLUMNS.slice(1).map((c) => `null as ${c}`).join(', ');
const STARTED_COLUMNS = `${STARTED_TASK_COLUMNS.map((c) => `t.${c}`).join(', ')}, t.traceparent, t.tracestate,
               greatest(0, extract(epoch from t.started_at - clock.now) * 1000)::float8 as wait_ms`;

/** The end of a rated start's wait budget ($5 s from now): the line's count and rate_decided's `over` read the same one. */
const START_BUDGET_END = `clock.now + make_interval(secs => $5::int)`;

/**
 * Where a key's start line stands after this statement's starts of it (over
 * `k` of rate_keys and `clock`): every task the rated start takes is due, so
 * the key's i-th starts at greatest(line, now) + (i - 1) steps, and those at
 * or before the wait budget ($5 s from now) go; the line moves a step past
 * the last of them (as far as it stood, if none does). In closed form: the
 * count that fits is floor((budget's end - greatest(line, now)) / step) + 1,
 * at most the key's n and at least none (a line past the budget). The
 * epochs are numeric, so the division is exact.
 */
const startLineAfter = (line: string) => `greatest(${line}, clock.now)
              + least(k.n, greatest(0, floor(extract(epoch from ${START_BUDGET_END} - greatest(${line}, clock.now))
                                               / extract(epoch from k.step)) + 1))::int * k.step`;

/** The batch's ids rate_tasks did not take (started_now_skips_rate_tasks). */
const NOT_RATE_TASKS = 'array(select m.id from msg m where m.id not in (select r.id from rate_tasks r))';

/**
 * Fenced start for a whole message batch: marks `started_at` only where id,
 * epoch and `running` still match and the attempt has not started yet, so a
 * duplicate delivery, a cancelled task or a stale epoch never runs. The lease
 * is stretched to the task's timeout plus grace from its start.
 *
 * start_only_when_due: a task starts only once its run_at has come on the
 * database clock. A message delivered early (the Queue's whole-second delay
 * rounded down, plus its batch timeout) leaves its task claimed but not
 * started, so until then every user action (reschedule by key, cancel, queue
 * or schedule pause) still takes it back; it comes back as `early` with the
 * wait, and the consumer starts it with this same statement once due.
 *
 * refuse_if_queue_paused: a task whose queue was paused after it was claimed
 * (sent with a delay by the look-ahead) does not start. It goes back to
 * `queued` with its vtime (so it keeps its place) and the attempt counted at
 * the claim refunded, and comes back as lost with reason `queue_paused`. Both
 * branches read the queue's flag in the statement's one snapshot, so each
 * task takes exactly one of them.
 *
 * Rate limits (issue 16, refuse_over_rate): a rate-limited task starts on its
 * key's start line (rate_start_lines, migration 0023: apart from the claim
 * line, so starts and claims never wait for each other's lock) once due, at
 * greatest(now, line): a place up to $5 seconds
 * later than now is taken at once (started_at set there; the consumer waits
 * for it, so in that wait the task shows running: the one exception to
 * start_only_when_due). The line moves a step past each place; the starts it
 * records are therefore a step apart. One the line would push past
 * its due time and more than $5 seconds from now goes back to `queued` (vtime kept,
 * attempt refunded, run_at moved to when allowed) and comes back as lost
 * with reason `rate_limited`.
 *
 * Two statements from this one text (issue 12): `rated` is the whole of it;
 * without, the rate limits' seven CTEs are left out, for batches whose
 * messages say none of their tasks has a rate limit. A Worker plans every
 * statement afresh (a new connection per invocation), and those CTEs were
 * half of the start's planning (5.0-5.6 -> 2.2-2.6 ms per 100 tasks, custom plans).
 * Without them, a task that does have a rate limit is not started
 * (start_unrated_skips_rated) and comes back with reason `rated`, and
 * startIfClaimed starts it with the whole statement: the messages' word is
 * a hint, never a guard.
 */
const startStatement = (rated: boolean) => `with clock as (select coalesce($1::timestamptz, now()) as now),
   msg as (${batchRows([['id', '$2::bigint[]'], ['epoch', '$3::bigint[]']])}),${rated ? `
   -- The batch's rate-limited tasks that may start, as this statement's
   -- snapshot has them (not locked: a task cancelled meanwhile fails the
   -- recheck in started_on_line and leaves its place unused, a gap in the
   -- line, never an extra start). A rated task's row is written only after
   -- its key's line row is held (started_on_line and rate_refused read the
   -- places), so two starts of one task (a duplicate delivery) queue on the
   -- line, not on each other's tasks. Locking them here cost a WAL record
   -- per task (issue 16, seventh pass).
   -- Each with its place among its key's tasks here (pos, by id) and their
   -- count (n), from one sort.
   rate_tasks as (
     select r.*, row_number() over (partition by r.tenant, r.rate_key order by r.id) as pos,
            count(*) over (partition by r.tenant, r.rate_key)::int as n
     from (select t.id, msg.epoch, t.tenant, t.rate_key, t.rate_limit, t.rate_period_seconds
           from msg join tasks t on t.id = msg.id cross join clock
           where t.id = any($2::bigint[]) and t.lease_epoch = msg.epoch and t.status = 'running' and t.started_at is null
             and t.rate_key is not null
             -- start_only_when_due: an early message takes no place on the line yet.
             and t.run_at <= clock.now
             and (${NO_QUEUE_PAUSED} or not exists (select 1 from queues q where q.name = t.queue and q.paused))) r
   ),
   -- start_rate_of_key: the spacing is the key's, as its last claim set it
   -- (from the most recently enqueued task it claimed), not that of the few
   -- tasks this statement starts: early messages start in groups, each with
   -- its own statement. The batch's newest only if the key has no row yet.
   -- One row per key (its newest here, the last by pos): its tasks here (n)
   -- and its step.
   rate_keys as (
     select n.tenant, n.rate_key, n.n,
            rate_limit_step(coalesce(k.max_starts, n.rate_limit), coalesce(k.period_seconds, n.rate_period_seconds)) as step
     from rate_tasks n
          left join rate_limits k on k.tenant = n.tenant and k.key = n.rate_key
     where n.pos = n.n
   ),
   -- start_line_advance: the line moves a step past every start it lets
   -- through (startLineAfter), one row per key.
   rate_starts as (
     insert into rate_start_lines as l (tenant, key, next_start_at)
     select k.tenant, k.rate_key, ${startLineAfter(`'-infinity'::timestamptz`)}
     from rate_keys k, clock
     order by k.tenant, k.rate_key
     on conflict (tenant, key) do update set
       start_from = l.next_start_at,
       next_start_at = (select ${startLineAfter('l.next_start_at')}
                        from rate_keys k, clock where k.tenant = l.tenant and k.rate_key = l.key),
       updated_at = now()
     returning l.tenant, l.key, l.start_from
   ),
   -- The key's i-th task here (by id) is placed i - 1 steps after
   -- greatest(line, now); over: past the wait budget.
   rate_decided as (
     select r.id, r.epoch, s.start_at, s.start_at > ${START_BUDGET_END} as over
     from rate_tasks r
          join rate_keys k on k.tenant = r.tenant and k.rate_key = r.rate_key
          join rate_starts g on g.tenant = r.tenant and g.key = r.rate_key, clock,
          lateral (select greatest(g.start_from, clock.now) + (r.pos - 1) * k.step as start_at) s
   ),` : ''}
   refused as (
     update tasks t set
       status = 'queued',
       attempts = t.attempts - 1,
       dispatched_at = null,
       lease_expires_at = null,
       updated_at = clock.now
     from msg, clock
     where t.id = any($2::bigint[]) and t.id = msg.id and t.lease_epoch = msg.epoch
       and t.status = 'running' and t.started_at is null
       and exists (select 1 from queues q where q.name = t.queue and q.paused)
       and not ${NO_QUEUE_PAUSED}
     returning t.id, t.tenant, t.concurrency_key
   ),${rated ? `
   -- refuse_over_rate: a start the line would push past the wait budget goes
   -- back queued with its vtime, the attempt refunded, run_at moved to when
   -- the line allows (the rows rate_tasks found startable, rechecked). Named
   -- by the ids refused alone (usually none): by the batch's, the generic
   -- plan rescanned rate_decided and msg for every task row; by the join
   -- alone, it read tasks_running_idx whole.
   rate_refused as (
     update tasks t set
       status = 'queued',
       attempts = t.attempts - 1,
       run_at = rd.start_at,
       dispatched_at = null,
       lease_expires_at = null,
       updated_at = clock.now
     from rate_decided rd, clock
     where t.id = any(array(select x.id from rate_decided x where x.over)) and t.id = rd.id and t.lease_epoch = rd.epoch
       and t.status = 'running' and t.started_at is null and rd.over
     returning t.id, t.tenant, t.concurrency_key
   ),` : ''}
   -- Both refusals give the slot back (the task waits again).
   ${freeSlotsOf(`(select tenant, concurrency_key from refused${rated ? ' union all select tenant, concurrency_key from rate_refused' : ''})`)},
   -- The starts: those without a rate limit from the batch, the rate-limited
   -- ones from their places on the line. One update over the batch joined to
   -- rate_decided rescanned rate_decided for every task row (the planner
   -- expects it near empty): quadratic in a rated batch.
   -- started_now_skips_rate_tasks: in the whole statement, only the tasks
   -- rate_tasks did not take are read here (none, in a batch the sweep sent
   -- rated): those it took have a rate limit in this same snapshot, so this
   -- update would read each and start none (0.2 ms of a rated start of 100).
   started_now as (
     update tasks t set
       started_at = clock.now,
       dispatched_at = ${DISPATCHED_AT},
       lease_expires_at = clock.now + make_interval(secs => (t.timeout_ms / 1000.0) + $4::int),
       updated_at = clock.now
     from msg, clock
     where t.id = any(${rated ? NOT_RATE_TASKS : '$2::bigint[]'}) and t.id = msg.id and t.lease_epoch = msg.epoch
       and t.status = 'running' and t.started_at is null and t.rate_key is null
       and (${NO_QUEUE_PAUSED} or not exists (select 1 from queues q where q.name = t.queue and q.paused))
       and t.run_at <= clock.now
     returning ${STARTED_COLUMNS}
   ),${rated ? `
   -- The places the rate-limited starts take, as arrays and back to rows
   -- (batchRows): estimated like the batch, so the update joins them to
   -- their tasks by hashing. The three arrays come from one aggregate over
   -- one scan, so they are aligned without a sort.
   -- refuse_over_rate: not the starts the rate line pushed too far (rate_refused took them).
   place_arrays as (
     select array_agg(id) as ids, array_agg(epoch) as epochs, array_agg(start_at) as starts
     from rate_decided where not over
   ),
   places as materialized (${batchRows([
     ['id', '(select ids from place_arrays)'],
     ['epoch', '(select epochs from place_arrays)'],
     ['start_at', '(select starts from place_arrays)'],
   ])}),
   -- A rate-limited start takes its place on the key's line: up to $5 s
   -- later than now (the consumer waits for it). The conditions are
   -- rate_tasks's, rechecked on the row as it now stands.
   -- start_on_line_keeps_run_at: started_at records the place (never before
   -- run_at: the place is at or after the task's due time); run_at, in two
   -- indexes, is left as it was, so the start can be a HOT update.
   started_on_line as (
     update tasks t set
       started_at = greatest(clock.now, p.start_at),
       dispatched_at = ${DISPATCHED_AT},
       lease_expires_at = greatest(clock.now, p.start_at) + make_interval(secs => (t.timeout_ms / 1000.0) + $4::int),
       updated_at = clock.now
     from places p, clock
     where t.id = any($2::bigint[]) and t.id = p.id and t.lease_epoch = p.epoch
       and t.status = 'running' and t.started_at is null
       and (${NO_QUEUE_PAUSED} or not exists (select 1 from queues q where q.name = t.queue and q.paused))
       and t.run_at <= clock.now
     returning ${STARTED_COLUMNS}
   ),
   started as (select * from started_now union all select * from started_on_line),` : `
   started as (select * from started_now),`}
   -- Attempt history (migration 0017): a message that started nothing is
   -- recorded against its epoch, \`cancelled\` when the task was cancelled
   -- after its early claim, \`skipped_stale\` otherwise (a stale or duplicate
   -- message).
   skipped as (
     insert into task_attempts (task_id, attempt, epoch, outcome, finished_at, error_name, error_message)
     select m.id, cur.attempts, m.epoch, case when cur.status = 'cancelled' then 'cancelled' else 'skipped_stale' end,
            clock.now, 'StaleMessage',
            'message of epoch ' || m.epoch || ' skipped: the task is ' || cur.status || ' at epoch ' || cur.lease_epoch
     from msg m join tasks cur on cur.id = m.id and cur.id = any($2::bigint[]), clock
     -- Not a message of the current claim that did not start: early (it
     -- waits and comes back), refused for a paused queue (refunded), or
     -- rate-limited and left to the whole statement.
     where m.id not in (select id from started)
       and not (cur.lease_epoch = m.epoch and cur.status = 'running' and cur.started_at is null)
   )
   select s.*, null::bigint as epoch, null::bigint as current_epoch, null::text as current_status,
          true as started, null::text as reason, s.rate_key is not null as rated
   from started s
   union all
   select m.id, ${STARTED_NULLS_BUT_ID}, null, null,
          case when r.id is null${rated ? ' and rr.id is null' : ''}
               then greatest(0, extract(epoch from cur.run_at - clock.now) * 1000)::float8 end,
          m.epoch, cur.lease_epoch, case when r.id is not null${rated ? ' or rr.id is not null' : ''} then 'queued' else cur.status end, false,
          case when r.id is not null then 'queue_paused'${rated ? `
               when rr.id is not null then 'rate_limited'` : `
               -- start_unrated_skips_rated: due, held, and left for the whole statement.
               when cur.rate_key is not null and cur.lease_epoch = m.epoch and cur.status = 'running'
                    and cur.started_at is null and cur.run_at <= clock.now then 'rated'`}
               when cur.lease_epoch = m.epoch and cur.status = 'running' and cur.started_at is null and cur.run_at > clock.now
               then 'early' end,
          cur.rate_key is not null
   from msg m cross join clock cross join slots_freed
        left join tasks cur on cur.id = m.id and cur.id = any($2::bigint[]) left join refused r on r.id = m.id${rated ? `
        left join rate_refused rr on rr.id = m.id` : ''}
   where m.id not in (select id from started)`;

const tasksStartIfClaimed = sql('tasks_start_if_claimed', startStatement(true));
const tasksStartIfClaimedUnrated = sql('tasks_start_if_claimed_unrated', startStatement(false));

type StartRow = Pick<TaskRow, 'id' | 'tenant' | 'queue' | 'task' | 'payload' | 'attempts' | 'max_attempts' | 'timeout_ms' | 'lease_epoch' | 'callback_of'> &
  LostRow & {
    wait_ms: number | null;
    started: boolean;
    reason: 'queue_paused' | 'rate_limited' | 'rated' | 'early' | null;
    /** The task has a rate limit: an early one is started again with the whole statement. */
    rated: boolean | null;
    traceparent: string | null;
    tracestate: string | null;
  };

export interface StartResult {
  started: StartedTask[];
  early: EarlyTask[];
  lost: LostFence[];
}

/**
 * The fenced start of a batch: the statement without rate limits when no
 * message of the batch says `rated`, then the whole one for the tasks it
 * found rate-limited anyway (none when the messages are the sweep's; a
 * message from before the flag, or written by hand, costs that second
 * statement, never a start off its line).
 */
export async function startIfClaimed(
  q: Queryable,
  p: { now?: Now; tasks: readonly { id: string; epoch: number; rated?: boolean }[]; leaseGraceSeconds: number },
): Promise<StartResult> {
  const rated = p.tasks.some((t) => t.rated);
  const rows = await q.query<StartRow>(rated ? tasksStartIfClaimed : tasksStartIfClaimedUnrated, [
    at(p.now),
    p.tasks.map((t) => t.id),
    p.tasks.map((t) => t.epoch),
    p.leaseGraceSeconds,
    ...(rated ? [RATE_LIMIT_START_WAIT_SECONDS] : []),
  ]);
  const out: StartResult = { started: [], early: [], lost: [] };
  const left: { id: string; epoch: number; rated: true }[] = [];
  for (const r of rows) {
    if (r.started) {
      const trace = r.traceparent ? { traceparent: r.traceparent, tracestate: r.tracestate } : null;
      const task: StartedTaskFields = {
        id: String(r.id),
        tenant: r.tenant,
        queue: r.queue,
        task: r.task,
        payload: r.payload,
        attempts: r.attempts,
        maxAttempts: r.max_attempts,
        timeoutMs: r.timeout_ms,
        epoch: Number(r.lease_epoch),
        callbackOf: r.callback_of === null || r.callback_of === undefined ? null : String(r.callback_of),
      };
      out.started.push({ task, trace, waitMs: Number(r.wait_ms ?? 0) });
    } else if (r.reason === 'rated') left.push({ id: String(r.id), epoch: Number(r.epoch), rated: true });
    else if (r.reason === 'early') out.early.push({ id: String(r.id), epoch: Number(r.epoch), waitMs: Number(r.wait_ms), rated: r.rated === true });
    else out.lost.push(r.reason ? { ...lostFromRow(r), reason: r.reason } : lostFromRow(r));
  }
  if (left.length > 0) {
    const rest = await startIfClaimed(q, { ...p, tasks: left });
    out.started.push(...rest.started);
    out.early.push(...rest.early);
    out.lost.push(...rest.lost);
  }
  return out;
}

export type AttemptOutcome = 'succeeded' | 'failed' | 'permanent';

export interface AttemptResult {
  id: string;
  epoch: number;
  outcome: AttemptOutcome;
  error: string | null;
  /** Overrides the backoff (e.g. a Retry-After); null: the task's backoff. */
  retryDelayMs: number | null;
  /** For the attempt history: the error's name and message (at most 2 KiB together). */
  errorName?: string | null;
  errorMessage?: string | null;
  /** The attempt ran out of its timeout (outcome `timed_out` in the history). */
  timedOut?: boolean;
  /** For http tasks: the response status, when a response came. */
  httpStatus?: number | null;
  /** The handler's return value as JSON text (at most 64 KiB), stored on success; null: none. */
  result?: string | null;
}

export interface FinishedTask {
  id: string;
  status: TaskStatus;
  runAt: Date;
}

/**
 * Fenced finish for a whole batch: writes each result only where the epoch
 * still matches and the task is still `running`. A failure retries (back to
 * `scheduled`, run_at pushed out by the backoff) while attempts remain and the
 * task is at-least-once; otherwise it is `dead`, except an at-most-once task
 * that never started, which is left running for the reaper. Results that lost
 * the fence, or were so left, come back, never applied.
 */
const tasksFinishIfRunning = sql(
  'tasks_finish_if_running',
  `with clock as (select coalesce($1::timestamptz, now()) as now),
   res as (
     ${batchRows([
       ['id', '$2::bigint[]'],
       ['epoch', '$3::bigint[]'],
       ['outcome', '$4::text[]'],
       ['error', '$5::text[]'],
       ['retry_delay_ms', '$6::int[]'],
       ['error_name', '$7::text[]'],
       ['error_message', '$8::text[]'],
       ['timed_out', '$9::boolean[]'],
       ['http_status', '$10::int[]'],
       ['result', '$11::jsonb[]'],
     ])}
   ),
   -- read_once_but_failures: the update reads each task once, by id. Only a
   -- failure, which may retry, reads its task beside it (\`offset 0\` keeps
   -- the read behind its test of the outcome, so a success never pays it):
   -- the attempts left, the delivery, and the attempt's start the retry
   -- clears. Joined whole, every finish read each task twice (issue 12).
   decided as (
     select r.*, t.started_at as attempt_started_at, case
              when r.outcome = 'succeeded' then 'succeeded'
              -- Guard never_started_at_most_once: a failure reported for an
              -- at-most-once task whose fenced start never committed (only
              -- the dead-letter consumer reports one) is not an attempt: no
              -- handler ran. Left running, the reaper gives it back to
              -- \`queued\` with its attempt unspent.
              when r.outcome = 'failed' and t.delivery = 'at_most_once' and t.started_at is null then null
              when r.outcome = 'failed' and t.delivery = 'at_least_once' and t.attempts < t.max_attempts then 'scheduled'
              else 'dead'
            end as next_status
     from res r left join lateral (
       select t.delivery, t.attempts, t.max_attempts, t.started_at from tasks t
       where t.id = r.id and r.outcome = 'failed'
       offset 0) t on true
   ),
   finished as (
     update tasks t set
       status = d.next_status,
       finished_at = case when d.next_status = 'scheduled' then null else clock.now end,
       run_at = case when d.next_status = 'scheduled'
                     then clock.now + coalesce(d.retry_delay_ms, task_backoff_ms(t.backoff_base_ms, t.backoff_max_ms, t.attempts))
                                      * interval '1 millisecond'
                     else t.run_at end,
       vtime = case when d.next_status = 'scheduled' then null else t.vtime end,
       dispatched_at = case when d.next_status = 'scheduled' then null else t.dispatched_at end,
       started_at = case when d.next_status = 'scheduled' then null else t.started_at end,
       lease_expires_at = null,
       last_error = coalesce(d.error, t.last_error),
       result = case when d.next_status = 'succeeded' then d.result else t.result end,
       updated_at = clock.now
     from decided d, clock
     where t.id = any($2::bigint[]) and t.id = d.id and t.lease_epoch = d.epoch and t.status = 'running'
       and d.next_status is not null
     -- The finish leaves attempts as they were, and started_at too unless it retries.
     returning t.id, t.status, t.run_at, t.attempts, d.epoch, d.outcome, d.timed_out,
               case when t.status = 'scheduled' then d.attempt_started_at else t.started_at end as attempt_started_at,
               d.error_name, d.error_message, d.http_status, clock.now, t.tenant, t.concurrency_key
   ),
   ${freeSlotsOf('finished')},
   ${countPendingOf('pending_counted', '-', "(select tenant from finished where status in ('succeeded', 'dead'))")},
   -- Attempt history (migration 0017): one row per finish applied (the
   -- update's own rows, no join), none for a result that lost its fence.
   -- success_is_the_task_row: a success with no http status writes none
   -- either (issue 12: 274 B of WAL and an insert per drained task): its
   -- attempt is the task's own final one, and the read shows it from the
   -- task row (task_attempts_list).
   attempts_written as (
     insert into task_attempts (task_id, attempt, epoch, outcome, started_at, finished_at, error_name, error_message, http_status)
     select f.id, f.attempts, f.epoch,
            case when f.outcome = 'succeeded' then 'succeeded' when f.timed_out then 'timed_out' else 'failed' end,
            f.attempt_started_at, f.now, f.error_name, f.error_message, f.http_status
     from finished f
     where f.outcome <> 'succeeded' or f.http_status is not null
   )
   select f.id, null::bigint as epoch, f.status, f.run_at, null::bigint as current_epoch, null::text as current_status
   from finished f cross join slots_freed
   union all
   select r.id, r.epoch, null, null, cur.lease_epoch, cur.status
   from res r left join tasks cur on cur.id = r.id and cur.id = any($2::bigint[])
   where r.id not in (select id from finished)`,
);

export async function finishIfRunning(
  q: Queryable,
  p: { now?: Now; results: readonly AttemptResult[] },
): Promise<{ finished: FinishedTask[]; lost: LostFence[] }> {
  const rows = await q.query<LostRow & { status: TaskStatus | null; run_at: Date | null }>(tasksFinishIfRunning, [
    at(p.now),
    p.results.map((r) => r.id),
    p.results.map((r) => r.epoch),
    p.results.map((r) => r.outcome),
    p.results.map((r) => r.error),
    p.results.map((r) => (r.retryDelayMs === null ? null : Math.max(0, Math.round(r.retryDelayMs)))),
    p.results.map((r) => r.errorName ?? null),
    p.results.map((r) => r.errorMessage ?? null),
    p.results.map((r) => r.timedOut ?? false),
    p.results.map((r) => r.httpStatus ?? null),
    p.results.map((r) => r.result ?? null),
  ]);
  const finished: FinishedTask[] = [];
  const lost: LostFence[] = [];
  for (const r of rows) {
    if (r.status !== null && r.epoch === null) finished.push({ id: String(r.id), status: r.status, runAt: r.run_at! });
    else lost.push(lostFromRow(r));
  }
  return { finished, lost };
}

/** Heartbeat: pushes a running attempt's lease out, only for its own epoch. */
const tasksExtendLease = sql(
  'tasks_extend_lease_if_running',
  `update tasks set
     lease_expires_at = greatest(lease_expires_at, coalesce($1::timestamptz, now()) + make_interval(secs => $4::double precision)),
     updated_at = coalesce($1::timestamptz, now())
   where id = $2::bigint and lease_epoch = $3::bigint and status = 'running'
   returning lease_expires_at`,
);

export async function extendLeaseIfRunning(
  q: Queryable,
  p: { now?: Now; id: string; epoch: number; seconds: number },
): Promise<Date | null> {
  const rows = await q.query<{ lease_expires_at: Date }>(tasksExtendLease, [at(p.now), p.id, p.epoch, p.seconds]);
  return rows[0]?.lease_expires_at ?? null;
}
