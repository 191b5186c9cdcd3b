// /v1/concurrency/{key}: how many of the caller's tasks hold a key's slots.
import { createRoute, z } from '@hono/zod-openapi';
import { getConcurrencySlot, getRateLimit } from '../../db/sql/concurrency.ts';
import { notFound } from '../../errors.ts';
import { CONCURRENCY_KEY_MAX_LENGTH } from '../../tasks/options.ts';
import type { App } from '../context.ts';
import { commonErrors, json, notFoundError } from './common.ts';

/** The `{key}` of both routes: a flow-control key, as tasks name it. */
const KeyParams = z.object({
  key: z
    .string()
    .min(1)
    .max(CONCURRENCY_KEY_MAX_LENGTH)
    .openapi({ param: { name: 'key', in: 'path' }, example: 'partner' }),
});

export const ConcurrencySlotSchema = z
  .object({
    key: z.string(),
    running: z.int().openapi({ description: 'Tasks of this key claimed (including claimed early) or started, not finished.' }),
    limit: z.int().openapi({ description: 'The limit of the most recently enqueued task with this key.' }),
    waiting: z.int().openapi({ description: 'Due tasks of this key waiting for a slot.' }),
  })
  .openapi('ConcurrencySlot');

const getSlotRoute = createRoute({
  method: 'get',
  path: '/v1/concurrency/{key}',
  summary: "A concurrency key's running count and limit, for the caller's tenant",
  request: { params: KeyParams },
  responses: { 200: json(ConcurrencySlotSchema, 'The key'), ...commonErrors, ...notFoundError('concurrency key') },
});

export const RateLimitStateSchema = z
  .object({
    key: z.string(),
    limit: z.int().openapi({ description: 'Starts per period: the limit of the most recently claimed task with this key.' }),
    periodSeconds: z.int(),
    nextStartAt: z.string().nullable().openapi({ description: "The earliest instant the key's next task may start (null: now)." }),
    waiting: z.int().openapi({ description: 'Tasks of this key that have not started yet (scheduled, queued or claimed early).' }),
  })
  .openapi('RateLimitState');

const getRateRoute = createRoute({
  method: 'get',
  path: '/v1/rate-limits/{key}',
  summary: "A rate-limited key's limit, next allowed start and waiting tasks, for the caller's tenant",
  request: { params: KeyParams },
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
