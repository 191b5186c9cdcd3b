// The API's JSON shapes as plain TypeScript, so the installed package needs
// neither zod nor the server. The server's zod schemas (src/http/schemas/)
// stay the source of truth: test/client/types.check.ts, run by
// `npm run typecheck`, fails when a type here and its schema drift apart in
// either direction (a field added, dropped, retyped or made optional).

export type TaskStatus = 'scheduled' | 'queued' | 'running' | 'succeeded' | 'dead' | 'cancelled' | 'missed';
export type Delivery = 'at_least_once' | 'at_most_once';

/** Seconds; exponential backoff with full jitter. */
export interface Backoff {
  base: number;
  max: number;
}

/** Options a task, or a schedule for its occurrences, may set about attempts. */
interface TaskOptions {
  /** 1 to 100 (default 5). */
  maxAttempts?: number;
  /** Seconds (default `{ base: 1, max: 3600 }`). */
  backoff?: { base?: number; max?: number };
  /** Seconds per attempt, up to 900 (default 30). */
  timeout?: number;
  delivery?: Delivery;
  /**
   * At most `limit` (1-1,000) of the tenant's tasks with this `key` (1-256
   * characters) run at once; the most recently enqueued task's limit applies.
   */
  concurrency?: Concurrency;
  /**
   * At most `limit` (1-10,000) starts of the tenant's tasks with this `key`
   * per `periodSeconds` (1-86,400), spaced at least periodSeconds / limit
   * apart; tasks over it wait (their runAt moves), spending no attempt.
   */
  rateLimit?: RateLimit;
  /** -10 to 10 (default 0): higher first within the tenant's fair share, never more than the share. */
  priority?: number;
  /**
   * Completion callback: when the task reaches one of `on` (default all four), the task as
   * GET /v1/tasks/{id} shows it is POSTed to `url`, signed, webhook-id `<id>.callback`, retried.
   */
  callback?: { url: string; on?: CallbackStatus[] };
}

export type CallbackStatus = 'succeeded' | 'dead' | 'cancelled' | 'missed';
export interface Callback {
  url: string;
  on: CallbackStatus[];
}

export interface Concurrency {
  key: string;
  limit: number;
}

export interface RateLimit {
  key: string;
  limit: number;
  periodSeconds: number;
}

/** `GET /v1/rate-limits/:key`. */
export interface RateLimitState extends RateLimit {
  /** The earliest instant the key's next task may start (null: now). */
  nextStartAt: string | null;
  /** Tasks of this key waiting to start (scheduled, queued or claimed early). */
  waiting: number;
}

/** `GET /v1/concurrency/:key`. */
export interface ConcurrencySlot {
  key: string;
  /** Tasks of this key claimed (including claimed early) or started, not finished. */
  running: number;
  limit: number;
  /** Due tasks of this key waiting for a slot. */
  waiting: number;
}

/** The body of `POST /v1/tasks` (and each item of a batch). */
export interface TaskInput extends TaskOptions {
  /** The task type: `noop`, `http`, or one the Worker registers. */
  task: string;
  /** Checked against the task type's payload schema (default `{}`). */
  payload?: unknown;
  /** Default `default`. */
  queue?: string;
  /** Earliest start, ISO 8601 with a zone. Exclusive with `delay`. */
  runAt?: string;
  /** Seconds from now, on the database's clock. */
  delay?: number;
  /** Unique per tenant: reschedules a waiting task, or returns a spent one. */
  idempotencyKey?: string;
}

export interface Task {
  id: string;
  task: string;
  queue: string;
  status: TaskStatus;
  payload: unknown;
  runAt: string;
  createdAt: string;
  updatedAt: string;
  dispatchedAt: string | null;
  /** Claimed early by the look-ahead and handed to the Queue, not started yet (the task then shows as queued). */
  dispatch: { dispatchedAt: string | null; epoch: number } | null;
  startedAt: string | null;
  finishedAt: string | null;
  attempts: number;
  maxAttempts: number;
  lastError: string | null;
  idempotencyKey: string | null;
  delivery: Delivery;
  /** Seconds per attempt. */
  timeout: number;
  backoff: Backoff;
  scheduleId: string | null;
  scheduledFor: string | null;
  /** The terminal task this one replays. */
  replayOf: string | null;
  concurrency: Concurrency | null;
  rateLimit: RateLimit | null;
  priority: number;
  /** What the handler returned (any JSON, at most 64 KiB), once the task succeeded; null before. */
  result: unknown;
  callback: Callback | null;
  /** The task whose completion callback this task delivers. */
  callbackOf: string | null;
  /** The idempotency key was already spent: this is the existing task. */
  deduplicated?: boolean;
}

/** A spent idempotency key whose task retention has since deleted. */
export interface SpentTask {
  id: string;
  status: TaskStatus;
  idempotencyKey: string;
  deduplicated: true;
  purged: true;
}

export type RecurrenceUnit = 'minutes' | 'hours' | 'days' | 'weeks' | 'months';
export type Misfire = 'run_once' | 'catch_up' | 'skip';
export type Overlap = 'allow' | 'skip';

/** The body of `PUT /v1/schedules/:name`: exactly one of `cron`, `interval`, `recurrence`, `at`. */
export interface ScheduleInput extends TaskOptions {
  /** 5 fields, or 6 with seconds first. */
  cron?: string;
  /** IANA zone for cron and recurrence (default UTC). */
  timezone?: string;
  /** Every N seconds. */
  interval?: number;
  recurrence?: { every: number; unit: RecurrenceUnit; start: string };
  /** Fire once, at this instant. */
  at?: string;
  task: string;
  payload?: unknown;
  queue?: string;
  misfire?: Misfire;
  /** Seconds a late fire still counts as on time (default 60). */
  misfireGrace?: number;
  /** Most late fire times `catch_up` fires or `skip` records (default 100). */
  catchUpLimit?: number;
  overlap?: Overlap;
  enabled?: boolean;
}

export interface Schedule {
  name: string;
  kind: 'cron' | 'interval' | 'recurrence' | 'once';
  cron: string | null;
  timezone: string;
  interval: number | null;
  recurrence: { every: number; unit: RecurrenceUnit; start: string } | null;
  at: string | null;
  task: string;
  payload: unknown;
  queue: string;
  maxAttempts: number;
  backoff: Backoff;
  timeout: number;
  delivery: Delivery;
  concurrency: Concurrency | null;
  rateLimit: RateLimit | null;
  priority: number;
  callback: Callback | null;
  misfire: Misfire;
  misfireGrace: number;
  catchUpLimit: number;
  overlap: Overlap;
  enabled: boolean;
  nextRunAt: string | null;
  lastFiredAt: string | null;
  createdAt: string;
  updatedAt: string;
}

export interface QueueStats {
  name: string;
  paused: boolean;
  counts: Record<TaskStatus, number>;
  /** How long the oldest due, unclaimed task has waited. */
  lagSeconds: number;
}

export interface ApiKey {
  id: string;
  tenant: string;
  /** Public part of the key, for finding it in logs. */
  prefix: string;
  createdAt: string;
  revokedAt: string | null;
  /** The key itself: returned once, at creation, never again. */
  key?: string;
}

/** The tenant's webhook signing secret, and during a rotation the previous one. */
export interface SigningSecret {
  secret: string;
  createdAt: string;
  previous?: { secret: string; expiresAt: string };
}

/** When a replay is due: now by default, or `runAt` / `delay` seconds from now. */
export interface ReplayInput {
  runAt?: string;
  delay?: number;
}

/** Which tasks a bulk action matches (at least one field) and `limit` (1-10,000, default 1,000). */
export interface BulkFilter {
  queue?: string;
  status?: TaskStatus[];
  task?: string;
  createdAfter?: string;
  createdBefore?: string;
  ids?: string[];
  limit?: number;
}
export type BulkCancelInput = BulkFilter;
export type BulkReplayInput = BulkFilter;

export type AttemptOutcome = 'succeeded' | 'failed' | 'timed_out' | 'lease_expired' | 'cancelled' | 'skipped_stale';

/** One attempt of a task, from GET /v1/tasks/{id}/attempts (oldest first). */
export interface Attempt {
  /** 1 for the first; for a skipped message, the attempts counted when it arrived. */
  attempt: number;
  /** The lease epoch the attempt (or the skipped message) held. */
  epoch: number;
  /** When the handler started (null: it never did). */
  startedAt: string | null;
  finishedAt: string;
  durationMs: number | null;
  outcome: AttemptOutcome;
  /** Name and message, at most 2 KiB together. */
  error: { message: string; name: string } | null;
  /** http tasks only: the response status (null: no response). */
  status?: number | null;
}

/** One queue's minute of GET /v1/stats/finished: tasks finished by outcome, due-to-start p50/p99 in seconds. */
export interface MinuteStats {
  queue: string;
  minute: string;
  finished: Record<string, number>;
  dueToStartP50: number | null;
  dueToStartP99: number | null;
}
