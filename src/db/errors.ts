// SQLSTATE codes become domain errors here, and nowhere else.
import { AppError, quotaExceeded } from '../errors.ts';

interface PgErrorLike {
  code?: string;
  message?: string;
  detail?: string;
}

/** Pending tasks drain as they run: a refused enqueue may try again after this. */
export const PENDING_QUOTA_RETRY_AFTER_SECONDS = 30;

/** Connection-level failures: the caller may retry later; nothing was decided. */
const UNAVAILABLE = new Set([
  '08000', '08003', '08006', '08001', '08004', // connection exceptions
  '57P01', '57P02', '57P03', // admin shutdown, crash shutdown, cannot connect now
  '53300', // too many connections
]);

export function translateDbError(error: unknown): unknown {
  if (error instanceof AppError) return error;
  const e = error as PgErrorLike;
  // Raised by tasks_refuse_over_pending_quota (migration 0011) inside the enqueue.
  // Raised by tasks_keep_task_type_of_key (migration 0011) inside the enqueue.
  if (e?.code === 'TQ003') {
    const message = e.message ?? 'idempotency key held by another task type or queue';
    return new AppError('conflict', message, [{ path: 'idempotencyKey', message }], { subject: e.detail });
  }
  if (e?.code === 'TQ002') {
    return quotaExceeded('maxPendingTasks', e.message ?? 'quota maxPendingTasks exceeded', PENDING_QUOTA_RETRY_AFTER_SECONDS);
  }
  if (typeof e?.code === 'string' && UNAVAILABLE.has(e.code)) {
    return new AppError('database_unavailable', `database unavailable: ${e.message ?? e.code}`);
  }
  if (e?.code === undefined && error instanceof Error && /connect|socket|terminat|closed|ECONN|WebSocket/i.test(error.message)) {
    return new AppError('database_unavailable', `database unavailable: ${error.message}`);
  }
  return error;
}
