// Per-task options a caller may set (on a task, or on a schedule for its
// occurrences), resolved against the configured defaults in one place.
import type { Config } from '../config.ts';
import type { ErrorDetail } from '../errors.ts';
import { checkTarget } from '../handlers/ssrf.ts';
import { CALLBACK_STATUSES, type Delivery, type TaskCallback } from '../db/sql/taskRows.ts';

/**
 * A Cloudflare Queues consumer invocation has 15 minutes of wall clock. One
 * attempt must fit inside it with the consumer's early wait (a message sent
 * early waits out the rest before its run_at, at most MAX_EARLY_WAIT_SECONDS)
 * and a margin for the fenced start and finish, so a timeout above
 * MAX_TIMEOUT_SECONDS is refused (400 naming `timeout`) rather than cut off
 * by the platform with its result never stored.
 */
export const CONSUMER_WALL_CLOCK_SECONDS = 900;
export const MAX_EARLY_WAIT_SECONDS = 60;
export const MAX_TIMEOUT_SECONDS = CONSUMER_WALL_CLOCK_SECONDS - MAX_EARLY_WAIT_SECONDS - 60;

/**
 * Flow control (issue 16): at most `limit` tasks of one tenant with one `key`
 * run at once. The one place the bounds are defined (the API schema and the
 * migration's checks say the same).
 */
export const CONCURRENCY_KEY_MAX_LENGTH = 256;
export const CONCURRENCY_LIMIT_MAX = 1000;
/**
 * Rate limits (issue 16): at most `limit` starts of one tenant's tasks with
 * one `key` per `periodSeconds` (GCRA with no burst: starts at least
 * period / limit apart; migration 0018 says why). The migration's checks say
 * the same bounds.
 */
export const RATE_LIMIT_MAX = 10_000;
export const RATE_PERIOD_MAX_SECONDS = 86_400;
export interface RateLimitInput {
  key: string;
  limit: number;
  periodSeconds: number;
}
/** Priorities choose which of a tenant's tasks fill its fair share first. */
export const PRIORITY_MIN = -10;
export const PRIORITY_MAX = 10;
export interface ConcurrencyInput {
  key: string;
  limit: number;
}

export interface TaskOptionsInput {
  maxAttempts?: number;
  /** Seconds. */
  backoff?: { base?: number; max?: number };
  /** Seconds. */
  timeout?: number;
  delivery?: Delivery;
  concurrency?: ConcurrencyInput;
  rateLimit?: RateLimitInput;
  /** PRIORITY_MIN..PRIORITY_MAX, default 0. */
  priority?: number;
  /** Completion callback (issue 15); `on` defaults to every terminal status. */
  callback?: { url: string; on?: TaskCallback['on'] };
}

/** The callback as stored: `on` explicit (the trigger of migration 0017 reads it). */
export function callbackOf(input: TaskOptionsInput['callback']): TaskCallback | null {
  return input ? { url: input.url, on: input.on ? [...new Set(input.on)] : [...CALLBACK_STATUSES] } : null;
}

/** A callback URL's problem (the http task's SSRF check, at enqueue and schedule writes), or null. */
export function callbackProblem(input: TaskOptionsInput['callback'], config: Config, pathPrefix = ''): ErrorDetail | null {
  if (!input) return null;
  const check = checkTarget(input.url, { allowPrivate: config.allowPrivateTargets, allowedPorts: config.allowedTargetPorts });
  return check.ok ? null : { path: [pathPrefix, 'callback.url'].filter(Boolean).join('.'), message: check.reason };
}

export interface TaskOptions {
  maxAttempts: number;
  backoffBaseMs: number;
  backoffMaxMs: number;
  timeoutMs: number;
  delivery: Delivery;
}

/** Resolves the options; `problems` names fields (under `pathPrefix`) that contradict each other. */
export function resolveTaskOptions(
  input: TaskOptionsInput,
  config: Config,
  pathPrefix = '',
): { options: TaskOptions; problems: ErrorDetail[] } {
  const base = input.backoff?.base !== undefined ? Math.round(input.backoff.base * 1000) : config.defaultBackoffBaseMs;
  // An explicit base above the default cap raises the cap with it rather than failing.
  const max = input.backoff?.max !== undefined ? Math.round(input.backoff.max * 1000) : Math.max(config.defaultBackoffMaxMs, base);
  const problems: ErrorDetail[] =
    max < base ? [{ path: [pathPrefix, 'backoff.max'].filter(Boolean).join('.'), message: 'must be at least backoff.base' }] : [];
  return {
    options: {
      maxAttempts: input.maxAttempts ?? config.defaultMaxAttempts,
      backoffBaseMs: base,
      backoffMaxMs: max,
      timeoutMs: input.timeout !== undefined ? Math.round(input.timeout * 1000) : config.defaultTimeoutMs,
      delivery: input.delivery ?? 'at_least_once',
    },
    problems,
  };
}
