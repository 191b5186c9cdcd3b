// /v1/queues: the caller's own view of its queues.
import { createRoute, z } from '@hono/zod-openapi';
import { QUEUE_STATS_FINISHED_WINDOW_SECONDS, queueStats } from '../../db/sql/tenants.ts';
import type { App } from '../context.ts';
import { QueueStatsSchema } from '../schemas/queues.ts';
import { commonErrors, json } from './common.ts';

const listQueuesRoute = createRoute({
  method: 'get',
  path: '/v1/queues',
  summary: "Counts by status and lag per queue, for the caller's tenant",
  description:
    'Per queue with live tasks or tasks finished in the last hour: the live counts (scheduled, queued, running, as shown) now, ' +
    'and the tasks finished in the last hour by outcome (succeeded, dead, cancelled, missed).',
  responses: { 200: json(z.object({ queues: z.array(QueueStatsSchema) }), 'Queues'), ...commonErrors },
});

export function registerQueueRoutes(app: App): void {
  app.openapi(listQueuesRoute, async (c) => {
    const stats = await queueStats(c.env.db, {
      now: c.env.now,
      tenant: c.var.tenant,
      finishedWindowSeconds: QUEUE_STATS_FINISHED_WINDOW_SECONDS,
    });
    return c.json({ queues: stats.map((s) => ({ name: s.queue, paused: s.paused, counts: s.counts, lagSeconds: s.lagSeconds })) }, 200);
  });
}
