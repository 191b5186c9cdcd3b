// /v1/schedules: what a schedule write sends, and how a schedule is shown.
import { z } from '@hono/zod-openapi';
import { MISFIRE_POLICIES, OVERLAP_POLICIES, RECURRENCE_UNITS, SCHEDULE_KINDS, type Schedule } from '../../db/sql/scheduleRows.ts';
import { DELIVERIES } from '../../db/sql/taskRows.ts';
import { MAX_INTERVAL_SECONDS } from '../../schedules/recurrence.ts';
import { Instant, iso, nameSchema, namePattern, paging, QueueName } from './common.ts';
import { ConcurrencyJson, RateLimitJson } from './flow-control.ts';
import { CallbackJson, StatusFilter, TaskOptionFields, TaskType } from './tasks.ts';

const SCHEDULE_NAME_MAX = 128;
const SCHEDULE_NAME_PATTERN = namePattern(SCHEDULE_NAME_MAX);

export const ScheduleName = nameSchema(SCHEDULE_NAME_MAX).openapi({ param: { name: 'name', in: 'path' }, example: 'weekly-report' });

/** The fields that choose a schedule's kind (`at` makes a `once` schedule). */
const KIND_FIELDS = ['cron', 'interval', 'recurrence', 'at'] as const;

export const ScheduleWriteSchema = z
  .strictObject({
    cron: z.string().min(1).max(256).optional().openapi({ description: '5 fields, or 6 with seconds first', example: '0 9 * * MON' }),
    timezone: z.string().min(1).max(64).optional().openapi({ description: 'IANA zone for cron and recurrence (default UTC)', example: 'Europe/Paris' }),
    interval: z.int().min(1).max(MAX_INTERVAL_SECONDS).optional().openapi({ description: 'Every N seconds' }),
    recurrence: z
      .strictObject({ every: z.int().min(1), unit: z.enum(RECURRENCE_UNITS), start: Instant })
      .optional()
      .openapi({ description: 'Every N units from start; days, weeks and months follow the local calendar' }),
    at: Instant.optional().openapi({ description: 'Fire once, at this instant' }),
    task: TaskType,
    payload: z.unknown().optional(),
    queue: QueueName.optional(),
    ...TaskOptionFields,
    misfire: z.enum(MISFIRE_POLICIES).optional(),
    misfireGrace: z.int().min(0).max(86_400).optional().openapi({ description: 'Seconds a late fire still counts as on time (default 60)' }),
    catchUpLimit: z.int().min(1).max(1000).optional().openapi({ description: 'Most late fire times catch_up fires or skip records (default 100)' }),
    overlap: z.enum(OVERLAP_POLICIES).optional(),
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
    kind: z.enum(SCHEDULE_KINDS),
    cron: z.string().nullable(),
    timezone: z.string(),
    interval: z.int().nullable(),
    recurrence: z.object({ every: z.int(), unit: z.enum(RECURRENCE_UNITS), start: z.string() }).nullable(),
    at: z.string().nullable(),
    task: z.string(),
    payload: z.unknown(),
    queue: z.string(),
    maxAttempts: z.int(),
    backoff: z.object({ base: z.number(), max: z.number() }),
    timeout: z.number(),
    delivery: z.enum(DELIVERIES),
    concurrency: ConcurrencyJson,
    rateLimit: RateLimitJson,
    priority: z.int(),
    callback: CallbackJson,
    misfire: z.enum(MISFIRE_POLICIES),
    misfireGrace: z.int(),
    catchUpLimit: z.int(),
    overlap: z.enum(OVERLAP_POLICIES),
    enabled: z.boolean(),
    nextRunAt: z.string().nullable(),
    lastFiredAt: z.string().nullable(),
    createdAt: z.string(),
    updatedAt: z.string(),
  })
  .openapi('Schedule');

export function scheduleJson(s: Schedule): z.infer<typeof ScheduleSchema> {
  return {
    name: s.name,
    kind: s.kind,
    cron: s.cron,
    timezone: s.timezone,
    interval: s.intervalSeconds,
    recurrence:
      s.kind === 'recurrence' ? { every: s.recurrenceEvery!, unit: s.recurrenceUnit!, start: s.anchor!.toISOString() } : null,
    at: iso(s.fireAt),
    task: s.task,
    payload: s.payload,
    queue: s.queue,
    maxAttempts: s.maxAttempts,
    backoff: { base: s.options.backoffBaseMs / 1000, max: s.options.backoffMaxMs / 1000 },
    timeout: s.options.timeoutMs / 1000,
    delivery: s.options.delivery,
    concurrency: s.options.concurrency ?? null,
    rateLimit: s.options.rateLimit ?? null,
    priority: s.options.priority ?? 0,
    callback: s.options.callback ?? null,
    misfire: s.misfire,
    misfireGrace: s.misfireGraceSeconds,
    catchUpLimit: s.catchUpLimit,
    overlap: s.overlap,
    enabled: s.enabled,
    nextRunAt: iso(s.nextRunAt),
    lastFiredAt: iso(s.lastFiredAt),
    createdAt: s.createdAt.toISOString(),
    updatedAt: s.updatedAt.toISOString(),
  };
}

/** Schedules listed by name: the cursor is the last name. */
export const schedulePaging = paging('name', (key) => SCHEDULE_NAME_PATTERN.test(key));

export const ScheduleListQuery = z.strictObject({ ...schedulePaging.query });

/**
 * A schedule's occurrences, newest fire time first: the cursor is the last
 * fire time, a real instant written as toISOString writes it (2026-02-31 or
 * month 99 is refused).
 */
export const runPaging = paging(
  'at',
  (key) => /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/.test(key) && !Number.isNaN(Date.parse(key)) && new Date(key).toISOString() === key,
);

export const ScheduleRunsQuery = z.strictObject({ status: StatusFilter, ...runPaging.query });

export const NextQuery = z.strictObject({ count: z.coerce.number().int().min(1).max(100).default(10) });
