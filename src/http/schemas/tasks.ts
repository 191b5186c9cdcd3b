// /v1/tasks: what an enqueue sends, and how a task is shown.
import { z } from '@hono/zod-openapi';
import type { TaskInput } from '../../tasks/enqueue.ts';
import { CALLBACK_STATUSES, DELIVERIES, isClaimedNotStarted, shownStatus, TASK_STATUSES, type Task } from '../../db/sql/taskRows.ts';
import { MAX_TIMEOUT_SECONDS, PRIORITY_MAX, PRIORITY_MIN } from '../../tasks/options.ts';
import { Instant, isId, iso, nameSchema, paging, QueueName } from './common.ts';
import { ConcurrencyJson, ConcurrencySchema, RateLimitJson, RateLimitSchema } from './flow-control.ts';

const MAX_DELAY_SECONDS = 365 * 86_400;
const MAX_BATCH = 1000;

export const TaskType = nameSchema(128).openapi({ example: 'noop' });

const CallbackSchema = z
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

/** How a task or a schedule shows its callback. */
export const CallbackJson = z.object({ url: z.string(), on: z.array(z.enum(CALLBACK_STATUSES)) }).nullable();

/** What a task, or a schedule for its occurrences, may set about attempts. */
export const TaskOptionFields = {
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
  delivery: z.enum(DELIVERIES).optional(),
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
function inRunAtRange(runAt: string): boolean {
  const ms = Date.parse(runAt);
  return Number.isNaN(ms) || (ms > Date.UTC(2000, 0) && ms < Date.UTC(2200, 0));
}

/** The start of a task or a replay: runAt or delay (not both), runAt between the years 2000 and 2200. */
export function checkStart(t: { runAt?: string; delay?: number }, ctx: z.RefinementCtx): void {
  if (t.runAt !== undefined && t.delay !== undefined) ctx.addIssue({ code: 'custom', path: ['delay'], message: 'give runAt or delay, not both' });
  if (t.runAt !== undefined && !inRunAtRange(t.runAt)) ctx.addIssue({ code: 'custom', path: ['runAt'], message: 'must be between the years 2000 and 2200' });
}

export const Delay = z.number().min(0).max(MAX_DELAY_SECONDS).optional().openapi({ description: 'Seconds from now.' });

export const TaskCreateSchema = z
  .strictObject({
    task: TaskType,
    payload: z.unknown().optional().openapi({ description: "Checked against the task type's payload schema." }),
    queue: QueueName.optional(),
    runAt: Instant.optional().openapi({ description: 'Earliest start (ISO 8601 with a zone). Exclusive with delay.' }),
    delay: Delay,
    idempotencyKey: z.string().min(1).max(256).optional(),
    ...TaskOptionFields,
  })
  .superRefine(checkStart)
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

export const TaskBatchSchema = z
  .strictObject({ tasks: z.array(TaskCreateSchema).min(1).max(MAX_BATCH) })
  .openapi('TaskBatch');

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
    delivery: z.enum(DELIVERIES),
    timeout: z.number().openapi({ description: 'Seconds per attempt.' }),
    backoff: z.object({ base: z.number(), max: z.number() }),
    scheduleId: z.string().nullable(),
    scheduledFor: z.string().nullable(),
    replayOf: z.string().nullable().openapi({ description: 'The terminal task this one replays.' }),
    concurrency: ConcurrencyJson,
    rateLimit: RateLimitJson,
    priority: z.int(),
    result: z.unknown().openapi({
      description:
        "What the handler returned (any JSON, at most 64 KiB), once the task succeeded; null before. The http type's: {status, headers: {content-type}, body} (at most 64 KiB of the body, as JSON when it parses, else as text).",
    }),
    callback: CallbackJson,
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
    dispatch: claimed ? { dispatchedAt: iso(t.dispatchedAt), epoch: t.epoch } : null,
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

/** Tasks listed newest first: the cursor is the last task's id. */
export const taskPaging = paging('id', isId);

/** A comma-separated status filter, matched against the status as shown. */
export const StatusFilter = z
  .string()
  .refine((s) => s.split(',').every((x) => (TASK_STATUSES as readonly string[]).includes(x)), {
    message: `comma-separated statuses among ${TASK_STATUSES.join(', ')}`,
  })
  .optional()
  .openapi({
    example: 'queued,running',
    description: 'Matches the status as shown: a task claimed early but not started is queued, not running.',
  });

export const TaskListQuery = z.strictObject({
  queue: QueueName.optional(),
  status: StatusFilter,
  task: TaskType.optional(),
  createdAfter: Instant.optional(),
  createdBefore: Instant.optional(),
  ...taskPaging.query,
});

export const TaskPageSchema = z
  .object({ tasks: z.array(TaskSchema), nextCursor: z.string().nullable() })
  .openapi('TaskPage');
