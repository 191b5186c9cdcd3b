// Replay, bulk actions and attempts (issue 15).
import { z } from '@hono/zod-openapi';
import { CANCELLABLE_STATUSES } from '../../db/sql/bulkCancel.ts';
import { REPLAYABLE_STATUSES } from '../../db/sql/replay.ts';
import { TASK_STATUSES } from '../../db/sql/taskRows.ts';
import { Instant, QueueName, TaskIdString } from './common.ts';
import { checkStart, Delay, TaskType } from './tasks.ts';

export const MAX_BULK_LIMIT = 10_000;
export const DEFAULT_BULK_LIMIT = 1000;

export const ReplaySchema = z
  .strictObject({
    runAt: Instant.optional().openapi({ description: 'When the replay is due (default now). Exclusive with delay.' }),
    delay: Delay,
  })
  .superRefine(checkStart)
  .openapi('Replay');

const FILTER_FIELDS = ['queue', 'status', 'task', 'createdAfter', 'createdBefore', 'ids'] as const;

function bulkSchema(name: string, statuses: readonly string[], what: string) {
  return z
    .strictObject({
      queue: QueueName.optional(),
      status: z
        .array(z.enum(TASK_STATUSES))
        .min(1)
        .max(TASK_STATUSES.length)
        .optional()
        .openapi({ description: `Among ${statuses.join(', ')} (${what}).` }),
      task: TaskType.optional(),
      createdAfter: Instant.optional().openapi({ description: 'Created at or after this instant.' }),
      createdBefore: Instant.optional().openapi({ description: 'Created before this instant.' }),
      ids: z.array(TaskIdString).min(1).max(MAX_BULK_LIMIT).optional(),
      limit: z.int().min(1).max(MAX_BULK_LIMIT).optional().openapi({ description: `Most tasks this call acts on (default ${DEFAULT_BULK_LIMIT}).` }),
    })
    .superRefine((b, ctx) => {
      if (FILTER_FIELDS.every((f) => b[f] === undefined)) {
        ctx.addIssue({ code: 'custom', path: ['body'], message: `name at least one of ${FILTER_FIELDS.join(', ')}` });
      }
      b.status?.forEach((s, i) => {
        if (!statuses.includes(s)) ctx.addIssue({ code: 'custom', path: ['status', i], message: `${what}: one of ${statuses.join(', ')}` });
      });
    })
    .openapi(name);
}

export const BulkCancelSchema = bulkSchema('BulkCancel', CANCELLABLE_STATUSES, 'only tasks that have not started are cancelled');
export const BulkReplaySchema = bulkSchema('BulkReplay', REPLAYABLE_STATUSES, 'only finished tasks are replayed');
export type BulkFilter = z.infer<typeof BulkCancelSchema>;

export const BulkResultSchema = z
  .object({
    affected: z.int(),
    ids: z.array(z.string()).openapi({ description: 'The tasks acted on, ascending. Calling again with the same filter continues after them.' }),
  })
  .openapi('BulkResult');

export const BulkReplayResultSchema = z
  .object({
    affected: z.int(),
    ids: z.array(z.string()).openapi({ description: 'The originals replayed, ascending.' }),
    replayIds: z.array(z.string()).openapi({ description: 'Their replays (new tasks), in the same order.' }),
  })
  .openapi('BulkReplayResult');

export const AttemptSchema = z
  .object({
    attempt: z.int().openapi({ description: 'The attempt number (1 for the first); for a skipped message, the attempts counted when it arrived.' }),
    epoch: z.int().openapi({ description: 'The lease epoch the attempt (or the skipped message) held.' }),
    startedAt: z.string().nullable().openapi({ description: 'When the handler started (null: it never did).' }),
    finishedAt: z.string(),
    durationMs: z.int().nullable().openapi({ description: 'finishedAt - startedAt (null when it never started).' }),
    outcome: z.enum(['succeeded', 'failed', 'timed_out', 'lease_expired', 'cancelled', 'skipped_stale']),
    error: z
      .object({ message: z.string(), name: z.string() })
      .nullable()
      .openapi({ description: 'Why it did not succeed: name and message, at most 2 KiB together.' }),
    status: z.int().nullable().optional().openapi({ description: 'http tasks only: the response status (null: no response).' }),
  })
  .openapi('Attempt');

export const AttemptListSchema = z.object({ attempts: z.array(AttemptSchema) }).openapi('AttemptList');
