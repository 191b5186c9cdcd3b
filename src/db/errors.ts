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

/**
 * Class 22 (data exception: a value out of a column's range, text with NUL,
 * an invalid escape in jsonb, an impossible date) and class 54 (program limit
 * exceeded: jsonb nested past the stack depth limit, too many arguments) can
 * only come from the values a statement was given, which come from input.
 * The API validates those first and names the field; this is the backstop,
 * so a value that slips past validation is a 400 or 413, not a 500. No
 * statement writes anything when it raises one, so nothing is stored.
 */
const DATA_EXCEPTION_CLASS = '22';
const PROGRAM_LIMIT_CLASS = '54';
/** A CHECK constraint (a tenant's weight, a quota's range): the same backstop for the values the schemas bound. */
const CHECK_VIOLATION = '23514';

/**
 * Races a statement loses to a concurrent one and wins when run again: an
 * idempotency key spent under it (TQ001, raised by tasks_refuse_spent_idempotency_key,
 * migration 0002), a deadlock (40P01), a serialization failure (40001).
 */
const LOST_RACE = new Set(['TQ001', '40P01', '40001']);

/** True when running the same statement again may succeed (see LOST_RACE). */
export function isLostRace(error: unknown): boolean {
  const code = (error as PgErrorLike | null)?.code;
  return typeof code === 'string' && LOST_RACE.has(code);
}

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
  if (typeof e?.code === 'string' && e.code.length === 5) {
    const refused = `the database refused a value: ${e.message ?? e.code}`;
    if (e.code.startsWith(DATA_EXCEPTION_CLASS) || e.code === CHECK_VIOLATION) return new AppError('invalid_request', refused, [{ path: 'request', message: refused }]);
    if (e.code.startsWith(PROGRAM_LIMIT_CLASS)) return new AppError('payload_too_large', refused, [{ path: 'request', message: refused }]);
  }
  if (e?.code === undefined && error instanceof Error && /connect|socket|terminat|closed|ECONN|WebSocket/i.test(error.message)) {
    return new AppError('database_unavailable', `database unavailable: ${error.message}`);
  }
  return error;
}
