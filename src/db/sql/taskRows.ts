// A task as the core sees it, its row, and the one place its columns are
// mapped: beside the statements that select them, so nothing under db/sql
// imports from the layers above it (tasks/, schedules/, http/).

export const TASK_STATUSES = ['scheduled', 'queued', 'running', 'succeeded', 'dead', 'cancelled', 'missed'] as const;
export type TaskStatus = (typeof TASK_STATUSES)[number];
/** The statuses a task never leaves (tasks_finished_idx, tasks_finished_tenant_idx). */
export const TERMINAL_STATUSES = ['succeeded', 'dead', 'cancelled', 'missed'] as const;
/** The statuses before those: waiting or running (tasks_live_occurrences_idx, for occurrences). */
export const LIVE_STATUSES = ['scheduled', 'queued', 'running'] as const;

export const DELIVERIES = ['at_least_once', 'at_most_once'] as const;
export type Delivery = (typeof DELIVERIES)[number];

export interface Task {
  id: string;
  tenant: string;
  queue: string;
  task: string;
  payload: unknown;
  status: TaskStatus;
  runAt: Date;
  createdAt: Date;
  updatedAt: Date;
  dispatchedAt: Date | null;
  startedAt: Date | null;
  finishedAt: Date | null;
  attempts: number;
  maxAttempts: number;
  lastError: string | null;
  backoffBaseMs: number;
  backoffMaxMs: number;
  timeoutMs: number;
  delivery: Delivery;
  /** The fencing epoch (column lease_epoch): each claim bumps it, and every fenced write names it. */
  epoch: number;
  idempotencyKey: string | null;
  scheduleId: string | null;
  scheduledFor: Date | null;
  /** The terminal task this one replays (issue 15), or null. */
  replayOf: string | null;
  /** Flow control (issue 16): the concurrency key and limit, or null. */
  concurrency: { key: string; limit: number } | null;
  /** Flow control (issue 16): the rate limit, or null. */
  rateLimit: { key: string; limit: number; periodSeconds: number } | null;
  priority: number;
  /** The handler's return value, stored by the finish of a success (issue 15); null otherwise. */
  result: unknown;
  /** Completion callback (issue 15): POSTed to `url` when the task reaches a status in `on`. */
  callback: TaskCallback | null;
  /** The task whose completion callback this task is, or null. */
  callbackOf: string | null;
}

export const CALLBACK_STATUSES = TERMINAL_STATUSES;
export interface TaskCallback {
  url: string;
  on: (typeof CALLBACK_STATUSES)[number][];
}

/** The columns every task-returning statement selects, in `taskFromRow`'s shape. */
export const TASK_COLUMNS = `id, tenant, queue, task, payload, status, run_at, created_at, updated_at,
  dispatched_at, started_at, finished_at, attempts, max_attempts, last_error, backoff_base_ms,
  backoff_max_ms, timeout_ms, delivery, lease_epoch, idempotency_key, schedule_id, scheduled_for, replay_of,
  concurrency_key, concurrency_limit, priority, result, callback, callback_of, rate_key, rate_limit, rate_period_seconds`;

/**
 * TASK_COLUMNS for reads of `tasks` (unaliased): a task claimed but not
 * started shows when its batch was handed to the Queue, from the batch's
 * dispatch mark (migration 0015); every other row carries its own.
 */
export const TASK_COLUMNS_SHOWN = TASK_COLUMNS.replace(
  'dispatched_at,',
  `case when tasks.status = 'running' and tasks.started_at is null and tasks.dispatched_at is null
     then (select m.dispatched_at from dispatch_marks m where m.claim_token = tasks.claim_token)
     else tasks.dispatched_at end as dispatched_at,`,
);

export interface TaskRow {
  id: string;
  tenant: string;
  queue: string;
  task: string;
  payload: unknown;
  status: TaskStatus;
  run_at: Date;
  created_at: Date;
  updated_at: Date;
  dispatched_at: Date | null;
  started_at: Date | null;
  finished_at: Date | null;
  attempts: number;
  max_attempts: number;
  last_error: string | null;
  backoff_base_ms: number;
  backoff_max_ms: number;
  timeout_ms: number;
  delivery: Delivery;
  lease_epoch: string;
  idempotency_key: string | null;
  schedule_id: string | null;
  scheduled_for: Date | null;
  replay_of: string | null;
  concurrency_key?: string | null;
  concurrency_limit?: number | null;
  priority?: number | null;
  result?: unknown;
  callback?: TaskCallback | null;
  callback_of?: string | null;
  rate_key?: string | null;
  rate_limit?: number | null;
  rate_period_seconds?: number | null;
}

export function taskFromRow(r: TaskRow): Task {
  return {
    id: String(r.id),
    tenant: r.tenant,
    queue: r.queue,
    task: r.task,
    payload: r.payload,
    status: r.status,
    runAt: r.run_at,
    createdAt: r.created_at,
    updatedAt: r.updated_at,
    dispatchedAt: r.dispatched_at,
    startedAt: r.started_at,
    finishedAt: r.finished_at,
    attempts: r.attempts,
    maxAttempts: r.max_attempts,
    lastError: r.last_error,
    backoffBaseMs: r.backoff_base_ms,
    backoffMaxMs: r.backoff_max_ms,
    timeoutMs: r.timeout_ms,
    delivery: r.delivery,
    epoch: Number(r.lease_epoch),
    idempotencyKey: r.idempotency_key,
    scheduleId: r.schedule_id === null ? null : String(r.schedule_id),
    scheduledFor: r.scheduled_for,
    replayOf: r.replay_of === null || r.replay_of === undefined ? null : String(r.replay_of),
    concurrency:
      r.concurrency_key === null || r.concurrency_key === undefined
        ? null
        : { key: r.concurrency_key, limit: Number(r.concurrency_limit) },
    rateLimit:
      r.rate_key === null || r.rate_key === undefined
        ? null
        : { key: r.rate_key, limit: Number(r.rate_limit), periodSeconds: Number(r.rate_period_seconds) },
    priority: Number(r.priority ?? 0),
    result: r.result ?? null,
    callback: r.callback ?? null,
    callbackOf: r.callback_of === null || r.callback_of === undefined ? null : String(r.callback_of),
  };
}

/**
 * The look-ahead is invisible (DESIGN §5): a task claimed early and handed to
 * the Queue with a delay is, for its owner, still waiting until its handler
 * starts. Such a task shows as `queued` (where it was claimed from), its
 * attempt is not yet counted, and the claim appears only as `dispatch`.
 */
export function isClaimedNotStarted(t: Pick<Task, 'status' | 'startedAt'>): boolean {
  return t.status === 'running' && t.startedAt === null;
}

export function shownStatus(t: Pick<Task, 'status' | 'startedAt'>): TaskStatus {
  return isClaimedNotStarted(t) ? 'queued' : t.status;
}

/** The same rule in SQL, over a tasks row (optionally aliased): what status filters match. */
export const shownStatusSql = (alias = '') =>
  `(case when ${alias}status = 'running' and ${alias}started_at is null then 'queued' else ${alias}status end)`;
