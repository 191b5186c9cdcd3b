// /v1/admin: tenants, their keys, weights and quotas.
import { z } from '@hono/zod-openapi';
import { QUOTA_LIMITS } from '../../tenants/quotas.ts';
import { nameSchema, namePattern, QueueName } from './common.ts';

const TENANT_NAME_MAX = 64;
/** What X-Tenant and a key's tenant must match. */
export const TENANT_PATTERN = namePattern(TENANT_NAME_MAX);

export const TenantName = nameSchema(TENANT_NAME_MAX).openapi({ example: 'acme' });

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
const TenantQuotasSchema = z
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

/** A tenant's fair-queuing weight (migration 0031): its vtime advances by n / weight, which must stay a finite double. */
export const TENANT_WEIGHT_MIN = 0.001;
export const TENANT_WEIGHT_MAX = 1000;

export const TenantWeightSchema = z
  .strictObject({
    queue: QueueName.default('default'),
    weight: z
      .number()
      .min(TENANT_WEIGHT_MIN)
      .max(TENANT_WEIGHT_MAX)
      .optional()
      .openapi({ description: 'Share of claims relative to other tenants of the queue, from 0.001 to 1000 (default 1).' }),
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
