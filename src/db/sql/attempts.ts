// Attempt history (issue 15, migration 0017): read through the task, scoped
// by tenant. The rows are written by the statements that end attempts
// (tasks_finish_if_running, tasks_reap_expired, tasks_start_if_claimed).
import type { Queryable } from '../seam.ts';
import { sql } from '../seam.ts';

export type AttemptOutcome = 'succeeded' | 'failed' | 'timed_out' | 'lease_expired' | 'cancelled' | 'skipped_stale';

export interface Attempt {
  attempt: number;
  epoch: number;
  outcome: AttemptOutcome;
  startedAt: Date | null;
  finishedAt: Date;
  error: { name: string; message: string } | null;
  httpStatus: number | null;
}

/** Most attempts one read returns (a task has at most maxAttempts, plus skipped messages). */
export const MAX_ATTEMPTS_LISTED = 1000;

/**
 * A task's attempts, oldest first; one row with nulls when the task exists
 * and has none, no row when the tenant has no such task (guard: the tenant).
 *
 * success_from_task_row: the finish writes no row for a success without an
 * http status (issue 12); that attempt is the succeeded task's own final one
 * (its attempts, epoch, started_at and finished_at), shown from the task row
 * unless a row for it exists (a success finished by an earlier release, or
 * with an http status).
 */
const taskAttemptsList = sql(
  'task_attempts_list',
  `select t.task, a.attempt, a.epoch, a.outcome, a.started_at, a.finished_at, a.error_name, a.error_message, a.http_status
   from tasks t left join lateral (
     select r.attempt, r.epoch, r.outcome, r.started_at, r.finished_at, r.error_name, r.error_message, r.http_status
     from task_attempts r where r.task_id = t.id
     union all
     select t.attempts, t.lease_epoch, 'succeeded', t.started_at, t.finished_at, null, null, null
     where t.status = 'succeeded'
       and not exists (select 1 from task_attempts s where s.task_id = t.id and s.outcome = 'succeeded')
   ) a on true
   where t.tenant = $1::text and t.id = $2::bigint
   order by a.finished_at, a.epoch
   limit $3::int`,
);

/** null: no such task for this tenant. */
export async function listAttempts(q: Queryable, tenant: string, id: string): Promise<{ task: string; attempts: Attempt[] } | null> {
  const rows = await q.query<{
    task: string;
    attempt: number | null;
    epoch: string | null;
    outcome: AttemptOutcome | null;
    started_at: Date | null;
    finished_at: Date | null;
    error_name: string | null;
    error_message: string | null;
    http_status: number | null;
  }>(taskAttemptsList, [tenant, id, MAX_ATTEMPTS_LISTED]);
  if (rows.length === 0) return null;
  const attempts = rows
    .filter((r) => r.outcome !== null)
    .map((r) => ({
      attempt: r.attempt!,
      epoch: Number(r.epoch),
      outcome: r.outcome!,
      startedAt: r.started_at,
      finishedAt: r.finished_at!,
      error: r.error_name === null && r.error_message === null ? null : { name: r.error_name ?? 'Error', message: r.error_message ?? '' },
      httpStatus: r.http_status,
    }));
  return { task: rows[0]!.task, attempts };
}
