// What a handler throws to steer its task: fail for good, retry at a given
// time, or stop because its lease was lost.

/** Throw to fail the task for good: no retry, straight to `dead`. */
export class PermanentError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'PermanentError';
  }
}

/** The longest delay a RetryAfterError sets: a week, as the longest backoff. */
export const RETRY_AFTER_MAX_MS = 7 * 86_400_000;

/**
 * Throw to retry after a given delay instead of the task's backoff (e.g.
 * Retry-After). The delay is taken in whole milliseconds from 0 to
 * RETRY_AFTER_MAX_MS; one that is not a number leaves the task's backoff.
 */
export class RetryAfterError extends Error {
  readonly delayMs: number;
  constructor(message: string, delayMs: number) {
    super(message);
    this.name = 'RetryAfterError';
    this.delayMs = delayMs;
  }
}

/** The attempt lost its lease: another worker owns the task now. Stop. */
export class LeaseLostError extends Error {
  constructor(taskId: string, epoch: number) {
    super(`task ${taskId}: lease of epoch ${epoch} was lost`);
    this.name = 'LeaseLostError';
  }
}
