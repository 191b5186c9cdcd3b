// What a handler throws to steer its task: fail for good, retry at a given
// time, or stop because its lease was lost.

/** Throw to fail the task for good: no retry, straight to `dead`. */
export class PermanentError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'PermanentError';
  }
}

/** Throw to retry after a given delay instead of the task's backoff (e.g. Retry-After). */
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
