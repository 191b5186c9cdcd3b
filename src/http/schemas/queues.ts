// /v1/queues and the admin's queue pause.
import { z } from '@hono/zod-openapi';
import { TASK_STATUSES } from '../../db/sql/taskRows.ts';

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
