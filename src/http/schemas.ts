// The API's zod schemas: they validate requests, and the same definitions
// produce /openapi.json. Nothing about the wire format is described twice.
import { z } from '@hono/zod-openapi';
import { CALLBACK_STATUSES, isClaimedNotStarted, shownStatus, TASK_STATUSES, type Task } from '../tasks/model.ts';
import type { TaskInput } from '../tasks/enqueue.ts';
import { MAX_INTERVAL_SECONDS } from '../schedules/recurrence.ts';
import {
  CONCURRENCY_KEY_MAX_LENGTH,
  CONCURRENCY_LIMIT_MAX,
  MAX_TIMEOUT_SECONDS,
  PRIORITY_MAX,
  PRIORITY_MIN,
  RATE_LIMIT_MAX,
  RATE_PERIOD_MAX_SECONDS,
} from '../tasks/options.ts';
import { QUOTA_LIMITS } from '../tenants/quotas.ts';

export const MAX_DELAY_SECONDS = 365 * 86_400;

export const ErrorSchema = z
  .object({
    error: z.object({
      code: z.string().openapi({ example: 'invalid_request' }),
      message: z.string(),
      details: z.array(z.object({ path: z.string(), message: z.string() })).optional(),
    }),
  })
  .openapi('Error');

export const QueueName = z
  .string()
  .regex(/^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$/, 'letters, digits and _ . : - (at most 64, starting with a letter or digit)')
  .openapi({ example: 'default' });

export const TaskType = z
  .string()
  .regex(/^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$/, 'letters, digits and _ . : - (at most 128)')
  .openapi({ example: 'noop' });

export const Instant = z.iso.datetime({ offset: true }).openapi({ example: '2026-12-01T09:00:00Z' });

export const ConcurrencySchema = z
  .strictObject({
    key: z.string().min(1).max(CONCURRENCY_KEY_MAX_LENGTH),
    limit: z.int().min(1).max(CONCURRENCY_LIMIT_MAX),
  })
  .openapi('Concurrency', {
    description:
      "At most `limit` of the tenant's tasks with this `key` run at once (claimed, including claimed early, or started, and not finished), across every queue. Tasks over the limit wait, queued, and never hold back other keys. The same key with different limits: the most recently enqueued task's limit applies.",
  });

export const CallbackSchema = z
  .strictObject({
    url: z.string().min(1).max(2048).openapi({ description: 'http(s); checked against private and internal targets like an http task.' }),
    on: z
      .array(z.enum(CALLBACK_STATUSES))
      .min(1)
      .max(4)
      .optional()
      .openapi({ description: 'The statuses that call back (default: all four).' }),
  })
  .openapi('Callback', {
    description:
      "When the task reaches one of `on`, a durable `http` task POSTs the task (as GET /v1/tasks/{id} shows it) to `url`, signed with the tenant's secret, with webhook-id `<id>.callback`, retried.",
  });

export const RateLimitSchema = z
  .strictObject({
    key: z.string().min(1).max(CONCURRENCY_KEY_MAX_LENGTH),
    limit: z.int().min(1).max(RATE_LIMIT_MAX),
    periodSeconds: z.int().min(1).max(RATE_PERIOD_MAX_SECONDS),
  })
  .openapi('RateLimit', {
    description:
      "At most `limit` starts of the tenant's tasks with this `key` in any window of `periodSeconds` (GCRA without bursts: starts are spaced at least periodSeconds / limit apart). Tasks over the limit wait: their start (runAt) moves to when the limit allows; no attempt is spent. The same key with different limits: the most recently enqueued task's limit applies once it is claimed.",
  });

const RateLimitJson = z.object({ key: z.string(), limit: z.int(), periodSeconds: z.int() }).nullable();

/** What a task, or a schedule for its occurrences, may set about attempts. */
const TaskOptionFields = {
  callback: CallbackSchema.optional(),
  maxAttempts: z.int().min(1).max(100).optional(),
  backoff: z
    .strictObject({
      base: z.number().min(0.001).max(86_400).optional(),
      max: z.number().min(0.001).max(7 * 86_400).optional(),
    })
    .optional()
    .openapi({ description: 'Exponential backoff with full jitter, in seconds.' }),
  timeout: z
    .number()
    .min(0.001)
    .max(MAX_TIMEOUT_SECONDS)
    .optional()
    .openapi({ description: `Seconds per attempt (at most ${MAX_TIMEOUT_SECONDS}: an attempt must fit a Queue consumer's 15-minute wall clock).` }),
  delivery: z.enum(['at_least_once', 'at_most_once']).optional(),
  concurrency: ConcurrencySchema.optional(),
  rateLimit: RateLimitSchema.optional(),
  priority: z
    .int()
    .min(PRIORITY_MIN)
    .max(PRIORITY_MAX)
    .optional()
    .openapi({
      description:
        "Default 0. Within the tenant's fair share, higher priority is claimed first, then by due time; never more than the share. A steady stream of high-priority work can starve the tenant's own low-priority work.",
    }),
};

/** Unparsable instants are the datetime check's to report; this one bounds parsable ones. */
export function inRunAtRange(runAt: string): boolean {
  const ms = Date.parse(runAt);
  return Number.isNaN(ms) || (ms > Date.UTC(2000, 0) && ms < Date.UTC(2200, 0));
}

export const TaskCreateSchema = z
  .strictObject({
    task: TaskType,
    payload: z.unknown().optional().openapi({ description: "Checked against the task type's payload schema." }),
    queue: QueueName.optional(),
    runAt: Instant.optional().openapi({ description: 'Earliest start (ISO 8601 with a zone). Exclusive with delay.' }),
    delay: z.number().min(0).max(MAX_DELAY_SECONDS).optional().openapi({ description: 'Seconds from now.' }),
    idempotencyKey: z.string().min(1).max(256).optional(),
    ...TaskOptionFields,
  })
  .refine((t) => t.runAt === undefined || t.delay === undefined, {
    message: 'give runAt or delay, not both',
    path: ['delay'],
  })
  .refine((t) => t.runAt === undefined || inRunAtRange(t.runAt), {
    message: 'must be between the years 2000 and 2200',
    path: ['runAt'],
  })
  .openapi('TaskCreate');

export type TaskCreate = z.infer<typeof TaskCreateSchema>;

export function toTaskInput(body: TaskCreate): TaskInput {
  return {
    task: body.task,
    payload: body.payload,
    queue: body.queue,
    runAt: body.runAt !== undefined ? new Date(body.runAt) : undefined,
    delay: body.delay,
    idempotencyKey: body.idempotencyKey,
    maxAttempts: body.maxAttempts,
    backoff: body.backoff,
    timeout: body.timeout,
    delivery: body.delivery,
    concurrency: body.concurrency,
    rateLimit: body.rateLimit,
    priority: body.priority,
    callback: body.callback,
  };
}

const iso = (d: Date | null) => (d === null ? null : d.toISOString());

export const TaskSchema = z
  .object({
    id: z.string().openapi({ example: '42' }),
    task: z.string(),
    queue: z.string(),
    status: z.enum(TASK_STATUSES).openapi({
      description:
        'A task claimed early by the look-ahead and sent with a delay shows as queued until its handler starts (see dispatch).',
    }),
    payload: z.unknown(),
    runAt: z.string(),
    createdAt: z.string(),
    updatedAt: z.string(),
    dispatchedAt: z.string().nullable().openapi({ description: 'When the attempt that started was handed to the Queue.' }),
    dispatch: z
      .object({
        dispatchedAt: z.string().nullable().openapi({ description: 'When the claimed task was handed to the Queue (null: not yet sent).' }),
        epoch: z.int().openapi({ description: 'The claim\'s fencing epoch.' }),
      })
      .nullable()
      .openapi({
        description:
          'The internal claim of a task that has not started: the sweep claims work up to a minute early and sends it with a delay. Null otherwise. Rescheduling, cancelling or pausing still act on such a task.',
      }),
    startedAt: z.string().nullable(),
    finishedAt: z.string().nullable(),
    attempts: z.int(),
    maxAttempts: z.int(),
    lastError: z.string().nullable(),
    idempotencyKey: z.string().nullable(),
    delivery: z.enum(['at_least_once', 'at_most_once']),
    timeout: z.number().openapi({ description: 'Seconds per attempt.' }),
    backoff: z.object({ base: z.number(), max: z.number() }),
    scheduleId: z.string().nullable(),
    scheduledFor: z.string().nullable(),
    replayOf: z.string().nullable().openapi({ description: 'The terminal task this one replays.' }),
    concurrency: z.object({ key: z.string(), limit: z.int() }).nullable(),
    rateLimit: RateLimitJson,
    priority: z.int(),
    result: z.unknown().openapi({
      description:
        "What the handler returned (any JSON, at most 64 KiB), once the task succeeded; null before. The http type's: {status, headers: {content-type}, body} (at most 64 KiB of the body, as JSON when it parses, else as text).",
    }),
    callback: z.object({ url: z.string(), on: z.array(z.enum(CALLBACK_STATUSES)) }).nullable(),
    callbackOf: z.string().nullable().openapi({ description: 'The task whose completion callback this task delivers.' }),
    deduplicated: z.boolean().optional().openapi({ description: 'The idempotency key was already spent.' }),
  })
  .openapi('Task');

export type TaskJson = z.infer<typeof TaskSchema>;

export function taskJson(t: Task): TaskJson {
  const claimed = isClaimedNotStarted(t);
  return {
    id: t.id,
    task: t.task,
    queue: t.queue,
    status: shownStatus(t),
    payload: t.payload,
    runAt: t.runAt.toISOString(),
    createdAt: t.createdAt.toISOString(),
    updatedAt: t.updatedAt.toISOString(),
    dispatchedAt: claimed ? null : iso(t.dispatchedAt),
    dispatch: claimed ? { dispatchedAt: iso(t.dispatchedAt), epoch: t.leaseEpoch } : null,
    startedAt: iso(t.startedAt),
    finishedAt: iso(t.finishedAt),
    // The claim counts an attempt; it is spent only once the handler starts.
    attempts: claimed ? t.attempts - 1 : t.attempts,
    maxAttempts: t.maxAttempts,
    lastError: t.lastError,
    idempotencyKey: t.idempotencyKey,
    delivery: t.delivery,
    timeout: t.timeoutMs / 1000,
    backoff: { base: t.backoffBaseMs / 1000, max: t.backoffMaxMs / 1000 },
    scheduleId: t.scheduleId,
    scheduledFor: iso(t.scheduledFor),
    replayOf: t.replayOf,
    concurrency: t.concurrency,
    rateLimit: t.rateLimit,
    priority: t.priority,
    result: t.result,
    callback: t.callback,
    callbackOf: t.callbackOf,
  };
}

/** The largest id a bigint column holds. */
const MAX_BIGINT = 9_223_372_036_854_775_807n;
export const isId = (s: string) => /^[1-9]\d{0,18}$/.test(s) && BigInt(s) <= MAX_BIGINT;

/** `{id}` in a path: a positive bigint, as a string. */
export const IdParam = z.object({
  id: z
    .string()
    .refine(isId, 'an id (digits, at most 9223372036854775807)')
    .openapi({ param: { name: 'id', in: 'path' }, example: '42' }),
});

/** A spent key whose task row retention has since deleted: what is still known. */
export const SpentTaskSchema = z
  .object({
    id: z.string(),
    status: z.enum(TASK_STATUSES),
    idempotencyKey: z.string(),
    deduplicated: z.literal(true),
    purged: z.literal(true).openapi({ description: 'The task finished and retention has deleted it.' }),
  })
  .openapi('SpentTask');

export const TenantName = z
  .string()
  .regex(/^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$/, 'letters, digits and _ . : - (at most 64, starting with a letter or digit)')
  .openapi({ example: 'acme' });

export const KeyCreateSchema = z.strictObject({ tenant: TenantName }).openapi('KeyCreate');

export const ApiKeySchema = z
  .object({
    id: z.string(),
    tenant: z.string(),
    prefix: z.string().openapi({ description: 'Public part of the key, for finding it in logs.' }),
    createdAt: z.string(),
    revokedAt: z.string().nullable(),
    key: z.string().optional().openapi({ description: 'The key itself: returned once, at creation, never again.' }),
  })
  .openapi('ApiKey');


/** A tenant's quotas; an absent field keeps its value, null returns it to the default (vars QUOTA_*). */
export const TenantQuotasSchema = z
  .strictObject({
    maxPendingTasks: z.int().min(0).max(QUOTA_LIMITS.maxPendingTasks).nullable().optional().openapi({
      description: 'Most scheduled + queued + running tasks; an enqueue past it is a 429 (the whole batch).',
    }),
    maxSchedules: z.int().min(0).max(QUOTA_LIMITS.maxSchedules).nullable().optional().openapi({ description: 'Most schedules.' }),
    minScheduleIntervalSeconds: z.int().min(1).max(QUOTA_LIMITS.minScheduleIntervalSeconds).nullable().optional().openapi({
      description: 'Shortest period a schedule may fire at (a cron firing every second counts as 1).',
    }),
  })
  .openapi('TenantQuotas');

export const TenantWeightSchema = z
  .strictObject({
    queue: QueueName.default('default'),
    weight: z
      .number()
      .gt(0)
      .max(1000)
      .optional()
      .openapi({ description: 'Share of claims relative to other tenants of the queue (default 1).' }),
    quotas: TenantQuotasSchema.optional(),
  })
  .refine((b) => b.weight !== undefined || b.quotas !== undefined, { path: ['weight'], message: 'set weight, quotas, or both' })
  .openapi('TenantWeight');

export const TenantSetSchema = z
  .object({
    tenant: z.string(),
    queue: z.string().optional(),
    weight: z.number().optional(),
    quotas: z
      .object({ maxPendingTasks: z.int(), maxSchedules: z.int(), minScheduleIntervalSeconds: z.int() })
      .optional()
      .openapi({ description: 'The quotas now in force (defaults filled in).' }),
  })
  .openapi('TenantWeightSet');

export const QueuePauseSchema = z.strictObject({ paused: z.boolean() }).openapi('QueuePause');

export const QueueStatsSchema = z
  .object({
    name: z.string(),
    paused: z.boolean(),
    counts: z.record(z.enum(TASK_STATUSES), z.int()).openapi({
      description:
        'scheduled, queued and running: now, as shown (claimed early and not started counts as queued); ' +
        'succeeded, dead, cancelled and missed: finished in the last hour.',
    }),
    lagSeconds: z.number().openapi({ description: 'How long the oldest due, unclaimed task has waited.' }),
  })
  .openapi('QueueStats');

export const MAX_BATCH = 1000;

export const TaskBatchSchema = z
  .strictObject({ tasks: z.array(TaskCreateSchema).min(1).max(MAX_BATCH) })
  .openapi('TaskBatch');

/**
 * Opaque keyset cursors: the last key of a page (a task id, a schedule name,
 * an occurrence's fire time), tagged with its kind so a cursor of one listing
 * is refused by another.
 */
const CURSOR_KEYS: Record<'id' | 'name' | 'at', (key: string) => boolean> = {
  id: isId,
  name: (key) => /^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$/.test(key),
  // A real instant, written as toISOString writes it: 2026-02-31 or month 99 is refused.
  at: (key) => /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/.test(key) && !Number.isNaN(Date.parse(key)) && new Date(key).toISOString() === key,
};
export type CursorKind = keyof typeof CURSOR_KEYS;

export const encodeCursor = (kind: CursorKind, key: string) => btoa(`${kind}:${key}`).replace(/=+$/, '');

export function decodeCursor(kind: CursorKind, cursor: string): string | null {
  try {
    const text = atob(cursor);
    const key = text.startsWith(`${kind}:`) ? text.slice(kind.length + 1) : '';
    return CURSOR_KEYS[kind](key) ? key : null;
  } catch {
    return null;
  }
}

const cursorParam = (kind: CursorKind) =>
  z
    .string()
    .max(200)
    .refine((c) => decodeCursor(kind, c) !== null, 'not a cursor from a previous page')
    .optional()
    .openapi({ description: 'nextCursor of the previous page' });

export const PageLimit = z.coerce.number().int().min(1).max(500).default(50);

export const TaskListQuery = z.strictObject({
  queue: QueueName.optional(),
  status: z
    .string()
    .refine((s) => s.split(',').every((x) => (TASK_STATUSES as readonly string[]).includes(x)), {
      message: `comma-separated statuses among ${TASK_STATUSES.join(', ')}`,
    })
    .optional()
    .openapi({
      example: 'queued,running',
      description: 'Matches the status as shown: a task claimed early but not started is queued, not running.',
    }),
  task: TaskType.optional(),
  createdAfter: Instant.optional(),
  createdBefore: Instant.optional(),
  limit: PageLimit,
  cursor: cursorParam('id'),
});

export const TaskPageSchema = z
  .object({ tasks: z.array(TaskSchema), nextCursor: z.string().nullable() })
  .openapi('TaskPage');

// ---------------------------------------------------------------------------
// Schedules

export const ScheduleName = z
  .string()
  .regex(/^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$/, 'letters, digits and _ . : - (at most 128, starting with a letter or digit)')
  .openapi({ param: { name: 'name', in: 'path' }, example: 'weekly-report' });

const RECURRENCE_UNIT_VALUES = ['minutes', 'hours', 'days', 'weeks', 'months'] as const;
/** The fields that choose a schedule's kind (`at` makes a `once` schedule). */
const KIND_FIELDS = ['cron', 'interval', 'recurrence', 'at'] as const;

export const ScheduleWriteSchema = z
  .strictObject({
    cron: z.string().min(1).max(256).optional().openapi({ description: '5 fields, or 6 with seconds first', example: '0 9 * * MON' }),
    timezone: z.string().min(1).max(64).optional().openapi({ description: 'IANA zone for cron and recurrence (default UTC)', example: 'Europe/Paris' }),
    interval: z.int().min(1).max(MAX_INTERVAL_SECONDS).optional().openapi({ description: 'Every N seconds' }),
    recurrence: z
      .strictObject({ every: z.int().min(1), unit: z.enum(RECURRENCE_UNIT_VALUES), start: Instant })
      .optional()
      .openapi({ description: 'Every N units from start; days, weeks and months follow the local calendar' }),
    at: Instant.optional().openapi({ description: 'Fire once, at this instant' }),
    task: TaskType,
    payload: z.unknown().optional(),
    queue: QueueName.optional(),
    ...TaskOptionFields,
    misfire: z.enum(['run_once', 'catch_up', 'skip']).optional(),
    misfireGrace: z.int().min(0).max(86_400).optional().openapi({ description: 'Seconds a late fire still counts as on time (default 60)' }),
    catchUpLimit: z.int().min(1).max(1000).optional().openapi({ description: 'Most late fire times catch_up fires or skip records (default 100)' }),
    overlap: z.enum(['allow', 'skip']).optional(),
    enabled: z.boolean().optional(),
  })
  .superRefine((s, ctx) => {
    const given = KIND_FIELDS.filter((k) => s[k] !== undefined);
    if (given.length === 0) {
      ctx.addIssue({ code: 'custom', path: ['cron'], message: 'give exactly one of cron, interval, recurrence, at' });
    }
    for (const k of given.slice(1)) {
      ctx.addIssue({ code: 'custom', path: [k], message: `give exactly one of cron, interval, recurrence, at (also got ${given[0]})` });
    }
    if (s.timezone !== undefined && s.cron === undefined && s.recurrence === undefined) {
      ctx.addIssue({ code: 'custom', path: ['timezone'], message: 'only applies to cron and recurrence' });
    }
  })
  .openapi('ScheduleWrite');

export const ScheduleSchema = z
  .object({
    name: z.string(),
    kind: z.enum(['cron', 'interval', 'recurrence', 'once']),
    cron: z.string().nullable(),
    timezone: z.string(),
    interval: z.int().nullable(),
    recurrence: z.object({ every: z.int(), unit: z.enum(RECURRENCE_UNIT_VALUES), start: z.string() }).nullable(),
    at: z.string().nullable(),
    task: z.string(),
    payload: z.unknown(),
    queue: z.string(),
    maxAttempts: z.int(),
    backoff: z.object({ base: z.number(), max: z.number() }),
    timeout: z.number(),
    delivery: z.enum(['at_least_once', 'at_most_once']),
    concurrency: z.object({ key: z.string(), limit: z.int() }).nullable(),
    rateLimit: RateLimitJson,
    priority: z.int(),
    callback: z.object({ url: z.string(), on: z.array(z.enum(CALLBACK_STATUSES)) }).nullable(),
    misfire: z.enum(['run_once', 'catch_up', 'skip']),
    misfireGrace: z.int(),
    catchUpLimit: z.int(),
    overlap: z.enum(['allow', 'skip']),
    enabled: z.boolean(),
    nextRunAt: z.string().nullable(),
    lastFiredAt: z.string().nullable(),
    createdAt: z.string(),
    updatedAt: z.string(),
  })
  .openapi('Schedule');

export const ScheduleListQuery = z.strictObject({
  limit: PageLimit,
  cursor: cursorParam('name'),
});

export const ScheduleRunsQuery = z.strictObject({
  status: TaskListQuery.shape.status,
  limit: PageLimit,
  cursor: cursorParam('at'),
});

export const NextQuery = z.strictObject({ count: z.coerce.number().int().min(1).max(100).default(10) });
