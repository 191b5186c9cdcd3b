// One base error with a code. Domain errors carry no HTTP status; the HTTP
// layer maps codes to statuses in one place (src/http/errors.ts).

export type ErrorCode =
  | 'invalid_request'
  | 'unauthorized'
  | 'not_found'
  | 'conflict'
  | 'payload_too_large'
  | 'database_unavailable'
  | 'internal';

export interface ErrorDetail {
  /** Dotted path of the offending field, e.g. `tasks.3.runAt`. */
  path: string;
  message: string;
}

export class AppError extends Error {
  readonly code: ErrorCode;
  readonly details?: ErrorDetail[];
  constructor(code: ErrorCode, message: string, details?: ErrorDetail[]) {
    super(message);
    this.name = 'AppError';
    this.code = code;
    this.details = details;
  }
}

export const invalid = (message: string, details?: ErrorDetail[]) => new AppError('invalid_request', message, details);
export const notFound = (what: string) => new AppError('not_found', `${what} not found`);
export const conflict = (message: string) => new AppError('conflict', message);
