// /v1/stats: what the dashboard's charts draw, for the caller's tenant.
import { createRoute, z } from '@hono/zod-openapi';
import { finishedPerMinute } from '../../db/sql/stats.ts';
import type { App } from '../context.ts';
import { MinuteSchema, StatsQuery } from '../schemas/stats.ts';
import { commonErrors, json } from './common.ts';

const finishedRoute = createRoute({
  method: 'get',
  path: '/v1/stats/finished',
  summary: 'Per queue and minute: tasks finished by outcome, due-to-start p50/p99 (seconds)',
  request: { query: StatsQuery },
  responses: { 200: json(z.object({ minutes: z.array(MinuteSchema) }).openapi('FinishedStats'), 'Per-minute series'), ...commonErrors },
});

export function registerStatsRoutes(app: App): void {
  app.openapi(finishedRoute, async (c) => {
    const rows = await finishedPerMinute(c.env.db, { now: c.env.now, tenant: c.var.tenant, minutes: c.req.valid('query').minutes });
    return c.json({ minutes: rows.map((r) => ({ ...r, minute: r.minute.toISOString() })) }, 200);
  });
}
