// /v1/concurrency/{key}: how many of the caller's tasks hold a key's slots.
import { createRoute } from '@hono/zod-openapi';
import { getConcurrencySlot, getRateLimit } from '../../db/sql/concurrency.ts';
import { notFound } from '../../errors.ts';
import type { App } from '../context.ts';
import { ConcurrencySlotSchema, FlowKeyParam, RateLimitStateSchema } from '../schemas/flow-control.ts';
import { commonErrors, json, notFoundError } from './common.ts';

const getSlotRoute = createRoute({
  method: 'get',
  path: '/v1/concurrency/{key}',
  summary: "A concurrency key's running count and limit, for the caller's tenant",
  request: { params: FlowKeyParam },
  responses: { 200: json(ConcurrencySlotSchema, 'The key'), ...commonErrors, ...notFoundError('concurrency key') },
});

const getRateRoute = createRoute({
  method: 'get',
  path: '/v1/rate-limits/{key}',
  summary: "A rate-limited key's limit, next allowed start and waiting tasks, for the caller's tenant",
  request: { params: FlowKeyParam },
  responses: { 200: json(RateLimitStateSchema, 'The key'), ...commonErrors, ...notFoundError('rate limit key') },
});

export function registerConcurrencyRoutes(app: App): void {
  app.openapi(getSlotRoute, async (c) => {
    const slot = await getConcurrencySlot(c.env.db, { tenant: c.var.tenant, key: c.req.valid('param').key });
    if (!slot) throw notFound('concurrency key');
    return c.json(slot, 200);
  });
  // A key appears once one of its tasks was claimed.
  app.openapi(getRateRoute, async (c) => {
    const rate = await getRateLimit(c.env.db, { tenant: c.var.tenant, key: c.req.valid('param').key, now: c.env.now });
    if (!rate) throw notFound('rate limit key');
    return c.json({ ...rate, nextStartAt: rate.nextStartAt === null ? null : rate.nextStartAt.toISOString() }, 200);
  });
}
