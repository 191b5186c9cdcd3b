// One base error with a code. Domain errors carry no HTTP status; the HTTP
// layer maps codes to statuses in one place (src/http/errors.ts).

export type ErrorCode =
  | 'invalid_request'
  | 'unauthorized'
  | 'not_found'
  | 'conflict'
  | 'payload_too_large'
  /** A body sent without `Content-Type: application/json`. */
  | 'unsupported_media_type'
  | 'quota_exceeded'
  | 'database_unavailable'
  | 'internal'
  /** Any other status the HTTP framework refused a request with (the status is kept). */
  | 'http_error';

export interface ErrorDetail {
  /** Dotted path of the offending field, e.g. `tasks.3.runAt`. */
  path: string;
  message: string;
}

export class AppError extends Error {
  readonly code: ErrorCode;
  readonly details?: ErrorDetail[];
  /** When waiting may help (a quota that drains), how long to wait first. */
  readonly retryAfterSeconds?: number;
  /** The input value the error is about (e.g. an idempotency key), so a caller can name its field. */
  readonly subject?: string;
  constructor(
    code: ErrorCode,
    message: string,
    details?: ErrorDetail[],
    options: { retryAfterSeconds?: number; subject?: string } = {},
  ) {
    super(message);
    this.name = 'AppError';
    this.code = code;
    this.details = details;
    this.retryAfterSeconds = options.retryAfterSeconds;
    this.subject = options.subject;
  }
}

export const invalid = (message: string, details?: ErrorDetail[]) => new AppError('invalid_request', message, details);
export const notFound = (what: string) => new AppError('not_found', `${what} not found`);
export const conflict = (message: string) => new AppError('conflict', message);

/** The quotas a tenant has (PUT /v1/admin/tenants/{tenant} {"quotas"}), named as the API names them. */
export type QuotaName = 'maxPendingTasks' | 'maxSchedules' | 'minScheduleIntervalSeconds';

/**
 * A quota refused the request whole. Pending tasks drain, so waiting helps
 * there (Retry-After); a schedule count or period does not change by waiting.
 */
export const quotaExceeded = (quota: QuotaName, message: string, retryAfterSeconds?: number) =>
  new AppError('quota_exceeded', message, [{ path: quota, message }], { retryAfterSeconds });
