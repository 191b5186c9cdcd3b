// The one place where errors become HTTP: codes map to statuses, and every
// error leaves as {"error": {"code", "message", "details"?}}. A 5xx is a bug
// (or the database being unreachable), never a client's fault.
import type { Context } from 'hono';
import { HTTPException } from 'hono/http-exception';
import type { ContentfulStatusCode } from 'hono/utils/http-status';
import { AppError, type ErrorCode, type ErrorDetail } from '../errors.ts';
import type { AppEnv } from './context.ts';

const STATUS: Record<ErrorCode, ContentfulStatusCode> = {
  invalid_request: 400,
  unauthorized: 401,
  not_found: 404,
  conflict: 409,
  payload_too_large: 413,
  unsupported_media_type: 415,
  quota_exceeded: 429,
  database_unavailable: 503,
  internal: 500,
  http_error: 400,
};

export function errorBody(code: ErrorCode, message: string, details?: ErrorDetail[]) {
  return { error: { code, message, ...(details && details.length > 0 ? { details } : {}) } };
}

export function onError(error: Error, c: Context<AppEnv>): Response {
  if (error instanceof AppError) {
    const status = STATUS[error.code];
    if (status >= 500) c.var.log?.error('request failed', { code: error.code, error });
    if (error.retryAfterSeconds !== undefined) c.header('retry-after', String(error.retryAfterSeconds));
    return c.json(errorBody(error.code, error.message, error.details), status);
  }
  if (error instanceof HTTPException) {
    const status = error.status;
    const code: ErrorCode =
      status === 400 ? 'invalid_request' : status === 413 ? 'payload_too_large' : status === 415 ? 'unsupported_media_type' : 'http_error';
    const message =
      status === 400 && /JSON/i.test(error.message)
        ? 'the request body is not valid JSON'
        : status === 415
          ? 'send the body as JSON with Content-Type: application/json'
          : error.message || 'request refused';
    const details = status === 400 && /JSON/i.test(error.message) ? [{ path: 'body', message: 'malformed JSON' }] : undefined;
    return c.json(errorBody(code, message, details), status as ContentfulStatusCode);
  }
  c.var.log?.error('unhandled error', { error });
  return c.json(errorBody('internal', 'internal error'), 500);
}
