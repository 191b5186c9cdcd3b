// /v1/admin: keys, fair-queuing weights and queue pauses. Admin token only.
import { createRoute, z } from '@hono/zod-openapi';
import type { KeyCache } from '../../tenants/key-cache.ts';
import { listApiKeys, listKnownTenants, revokeApiKey, setQueuePaused, setTenantQuotas, setTenantWeight } from '../../db/sql/tenants.ts';
import { notFound } from '../../errors.ts';
import { createApiKey } from '../../tenants/keys.ts';
import { effectiveQuotas } from '../../tenants/quotas.ts';
import type { App, AppDeps } from '../context.ts';
import { IdParam, QueueName } from '../schemas/common.ts';
import { QueuePauseSchema } from '../schemas/queues.ts';
import { ApiKeySchema, KeyCreateSchema, TenantName, TenantSetSchema, TenantWeightSchema } from '../schemas/tenants.ts';
import { commonErrors, json, jsonBody, notFoundError } from './common.ts';

const createKeyRoute = createRoute({
  method: 'post',
  path: '/v1/admin/keys',
  summary: 'Create a tenant API key (shown once)',
  request: jsonBody(KeyCreateSchema),
  responses: { 201: json(ApiKeySchema, 'Created; `key` is shown this once'), ...commonErrors },
});

const revokeKeyRoute = createRoute({
  method: 'delete',
  path: '/v1/admin/keys/{id}',
  summary: 'Revoke a key; it stops working at once',
  request: { params: IdParam },
  responses: { 200: json(ApiKeySchema, 'Revoked'), ...commonErrors, ...notFoundError('key') },
});

const putTenantRoute = createRoute({
  method: 'put',
  path: '/v1/admin/tenants/{tenant}',
  summary: "Set a tenant's weight in a queue, its quotas, or both",
  request: { params: z.object({ tenant: TenantName.openapi({ param: { name: 'tenant', in: 'path' } }) }), ...jsonBody(TenantWeightSchema) },
  responses: {
    200: json(TenantSetSchema, 'Set'),
    ...commonErrors,
  },
});

const putQueueRoute = createRoute({
  method: 'put',
  path: '/v1/admin/queues/{name}',
  summary: 'Pause or resume a queue',
  request: { params: z.object({ name: QueueName.openapi({ param: { name: 'name', in: 'path' } }) }), ...jsonBody(QueuePauseSchema) },
  responses: { 200: json(z.object({ name: z.string(), paused: z.boolean() }).openapi('QueueState'), 'Set'), ...commonErrors },
});

const listTenantsRoute = createRoute({
  method: 'get',
  path: '/v1/admin/tenants',
  summary: 'Tenants with a key or a fair-queuing row, by name',
  request: { query: z.strictObject({ limit: z.coerce.number().int().min(1).max(1000).default(500) }) },
  responses: { 200: json(z.object({ tenants: z.array(z.string()) }).openapi('TenantList'), 'Tenants'), ...commonErrors },
});

const listKeysRoute = createRoute({
  method: 'get',
  path: '/v1/admin/keys',
  summary: 'API keys, newest first (never the key itself)',
  request: {
    query: z.strictObject({
      tenant: TenantName.optional(),
      limit: z.coerce.number().int().min(1).max(1000).default(200),
    }),
  },
  responses: { 200: json(z.object({ keys: z.array(ApiKeySchema) }).openapi('ApiKeyList'), 'Keys'), ...commonErrors },
});

const keyJson = (k: { id: string; tenant: string; prefix: string; createdAt: Date; revokedAt?: Date | null; key?: string }) => ({
  id: k.id,
  tenant: k.tenant,
  prefix: k.prefix,
  createdAt: k.createdAt.toISOString(),
  revokedAt: k.revokedAt ? k.revokedAt.toISOString() : null,
  ...(k.key ? { key: k.key } : {}),
});

/** `keyCache`: this isolate's checked keys, forgotten when a key is revoked. */
export function registerAdminRoutes(app: App, { config }: AppDeps, keyCache?: KeyCache): void {
  app.openapi(listTenantsRoute, async (c) => {
    return c.json({ tenants: await listKnownTenants(c.env.db, { limit: c.req.valid('query').limit }) }, 200);
  });

  app.openapi(listKeysRoute, async (c) => {
    const { tenant, limit } = c.req.valid('query');
    return c.json({ keys: (await listApiKeys(c.env.db, { tenant, limit })).map(keyJson) }, 200);
  });

  app.openapi(createKeyRoute, async (c) => {
    const created = await createApiKey(c.env.db, c.req.valid('json').tenant, c.env.now);
    c.var.log.info('api key created', { keyId: created.id, tenant: created.tenant, prefix: created.prefix });
    return c.json(keyJson(created), 201);
  });

  app.openapi(revokeKeyRoute, async (c) => {
    const revoked = await revokeApiKey(c.env.db, { now: c.env.now, id: c.req.valid('param').id });
    if (!revoked) throw notFound('key');
    // Other isolates stop trusting it within KEY_CACHE_SECONDS; this one at once.
    keyCache?.clear();
    c.var.log.info('api key revoked', { keyId: revoked.id, tenant: revoked.tenant });
    return c.json(keyJson(revoked), 200);
  });

  app.openapi(putTenantRoute, async (c) => {
    const { queue, weight, quotas } = c.req.valid('json');
    const tenant = c.req.valid('param').tenant;
    const [set, stored] = await Promise.all([
      weight !== undefined ? setTenantWeight(c.env.db, { queue: queue ?? 'default', tenant, weight }) : null,
      quotas !== undefined ? setTenantQuotas(c.env.db, { tenant, quotas }) : null,
    ]);
    if (stored) c.var.log.info('tenant quotas set', { tenant, quotas });
    return c.json({ ...(set ?? { tenant }), ...(stored ? { quotas: effectiveQuotas(stored, config) } : {}) }, 200);
  });

  app.openapi(putQueueRoute, async (c) => {
    const set = await setQueuePaused(c.env.db, { queue: c.req.valid('param').name, paused: c.req.valid('json').paused });
    return c.json(set, 200);
  });
}
