// Statements for tenants, their keys, fair-queuing weights and queues.
import type { Queryable } from '../seam.ts';
import { sql } from '../seam.ts';
import { shownStatusSql, TASK_STATUSES, type TaskStatus } from './taskRows.ts';

type Now = Date | null | undefined;
const at = (now: Now) => now ?? null;

export interface ApiKeyRow {
  id: string;
  tenant: string;
  prefix: string;
  createdAt: Date;
  revokedAt: Date | null;
}

const apiKeysInsert = sql(
  'api_keys_insert',
  `insert into api_keys (tenant, prefix, key_hash, created_at)
   values ($2::text, $3::text, $4::text, coalesce($1::timestamptz, now()))
   returning id, tenant, prefix, created_at, revoked_at`,
);

interface KeyRow {
  id: string;
  tenant: string;
  prefix: string;
  created_at: Date;
  revoked_at: Date | null;
}
const keyFromRow = (r: KeyRow): ApiKeyRow => ({
  id: String(r.id),
  tenant: r.tenant,
  prefix: r.prefix,
  createdAt: r.created_at,
  revokedAt: r.revoked_at,
});

export async function insertApiKey(q: Queryable, p: { now?: Now; tenant: string; prefix: string; hash: string }): Promise<ApiKeyRow> {
  const rows = await q.query<KeyRow>(apiKeysInsert, [at(p.now), p.tenant, p.prefix, p.hash]);
  return keyFromRow(rows[0]!);
}

/** The live key with this public prefix, if any: its tenant and stored hash. */
const apiKeysFindLive = sql(
  'api_keys_find_live',
  `select tenant, key_hash from api_keys where prefix = $1::text and revoked_at is null`,
);

export async function findLiveKey(q: Queryable, prefix: string): Promise<{ tenant: string; hash: string } | null> {
  const rows = await q.query<{ tenant: string; key_hash: string }>(apiKeysFindLive, [prefix]);
  return rows[0] ? { tenant: rows[0].tenant, hash: rows[0].key_hash } : null;
}

/** Revokes a key (idempotent: revoking twice keeps the first time). */
const apiKeysRevoke = sql(
  'api_keys_revoke',
  `update api_keys set revoked_at = coalesce(revoked_at, coalesce($1::timestamptz, now()))
   where id = $2::bigint
   returning id, tenant, prefix, created_at, revoked_at`,
);

export async function revokeApiKey(q: Queryable, p: { now?: Now; id: string }): Promise<ApiKeyRow | null> {
  const rows = await q.query<KeyRow>(apiKeysRevoke, [at(p.now), p.id]);
  return rows[0] ? keyFromRow(rows[0]) : null;
}

/** Sets a tenant's fair share in a queue; its vtime position is kept. */
const tenantsUpsertWeight = sql(
  'tenants_upsert_weight',
  `insert into tenants (queue, tenant, weight) values ($1::text, $2::text, $3::double precision)
   on conflict (queue, tenant) do update set weight = excluded.weight, updated_at = now()
   returning queue, tenant, weight`,
);

export async function setTenantWeight(
  q: Queryable,
  p: { queue: string; tenant: string; weight: number },
): Promise<{ queue: string; tenant: string; weight: number }> {
  const rows = await q.query<{ queue: string; tenant: string; weight: number }>(tenantsUpsertWeight, [p.queue, p.tenant, p.weight]);
  return rows[0]!;
}

/** Pauses or resumes a queue: a paused queue is never claimed, its order kept. */
const queuesUpsertPaused = sql(
  'queues_upsert_paused',
  `insert into queues (name, paused) values ($1::text, $2::boolean)
   on conflict (name) do update set paused = excluded.paused, updated_at = now()
   returning name, paused`,
);

export async function setQueuePaused(q: Queryable, p: { queue: string; paused: boolean }): Promise<{ name: string; paused: boolean }> {
  const rows = await q.query<{ name: string; paused: boolean }>(queuesUpsertPaused, [p.queue, p.paused]);
  return rows[0]!;
}

export interface QueueStats {
  queue: string;
  paused: boolean;
  /** Live statuses (as shown) now; finished statuses: finished within the window. */
  counts: Record<TaskStatus, number>;
  /** Seconds the oldest due, unclaimed task has waited past its run_at; 0 when none. */
  lagSeconds: number;
}

/** GET /v1/queues counts the tasks finished within this window (the dashboard's charts cover the same hour). */
export const QUEUE_STATS_FINISHED_WINDOW_SECONDS = 3600;

/**
 * A tenant's view of its queues: counts by status as shown (claimed early but
 * not started counts as queued), the lag of its oldest due task, and the
 * tasks finished within `$3` seconds by outcome. Reads only what partial
 * indexes bound (their predicates repeated verbatim so the planner uses
 * them): the tenant's waiting tasks (tasks_pending_tenant_idx), the running
 * ones (tasks_running_idx: a running task has no tenant index entry,
 * migration 0026, so every task in flight is read, the tenant's kept) and a
 * finished_at range (tasks_finished_idx), never the finished history, which the
 * dashboard would otherwise rescan every 2 s. Takes no locks.
 */
const queuesStatsForTenant = sql(
  'queues_stats_for_tenant',
  `with clock as (select coalesce($1::timestamptz, now()) as now),
   counted as (
     select t.queue, ${shownStatusSql('t.')} as status, count(*)::int as n,
            coalesce(extract(epoch from clock.now - min(t.run_at) filter (
              where t.status in ('scheduled', 'queued') and t.run_at <= clock.now)), 0)::float8 as lag
     from (select queue, status, started_at, run_at from tasks
           where status in ('scheduled', 'queued') and tenant = $2::text
           union all
           select queue, status, started_at, run_at from tasks
           where status = 'running' and tenant = $2::text) t cross join clock
     group by t.queue, 2, clock.now
     union all
     -- counts_window_bound_in_index: the window's ends are the clock's value
     -- (read once), so they are the retention index's condition. Joined with
     -- the clock they were a filter, and where the tenant's name looked
     -- selective (many tenants) the generic plan read the tenant's whole
     -- history by its index: 324-886 ms for a tenant of 300,000 finished tasks.
     select t.queue, t.status, count(*)::int, 0::float8
     from tasks t
     where t.status in ('succeeded', 'dead', 'cancelled', 'missed')
       and t.finished_at > (select now from clock) - make_interval(secs => $3::int)
       and t.finished_at <= (select now from clock)
       and t.tenant = $2::text
     group by t.queue, t.status
   )
   select c.queue, coalesce(q.paused, false) as paused, c.status, c.n, c.lag
   from counted c left join queues q on q.name = c.queue
   order by 1, 3`,
);

export async function queueStats(q: Queryable, p: { now?: Now; tenant: string; finishedWindowSeconds: number }): Promise<QueueStats[]> {
  const rows = await q.query<{ queue: string; paused: boolean; status: string; n: number; lag: number }>(queuesStatsForTenant, [
    at(p.now),
    p.tenant,
    p.finishedWindowSeconds,
  ]);
  const byQueue = new Map<string, QueueStats>();
  for (const r of rows) {
    let s = byQueue.get(r.queue);
    if (!s) {
      const counts = Object.fromEntries(TASK_STATUSES.map((status) => [status, 0])) as Record<TaskStatus, number>;
      byQueue.set(r.queue, (s = { queue: r.queue, paused: r.paused, counts, lagSeconds: 0 }));
    }
    s.counts[r.status as TaskStatus] = r.n;
    s.lagSeconds = Math.max(s.lagSeconds, Number(r.lag));
  }
  return [...byQueue.values()];
}

/** A tenant's stored quota overrides; null: the default from vars. */
export interface StoredQuotas {
  maxPendingTasks: number | null;
  maxSchedules: number | null;
  minScheduleIntervalSeconds: number | null;
}

interface QuotaRow {
  max_pending_tasks: number | null;
  max_schedules: number | null;
  min_schedule_interval_seconds: number | null;
}
const quotasFromRow = (r: QuotaRow): StoredQuotas => ({
  maxPendingTasks: r.max_pending_tasks,
  maxSchedules: r.max_schedules,
  minScheduleIntervalSeconds: r.min_schedule_interval_seconds,
});

/**
 * Sets some of a tenant's quotas: a field not sent (its flag false) keeps
 * its stored value; null returns it to the default. Locks the tenant's
 * tenant_quotas row only, which no enqueue writes.
 */
const tenantQuotasUpsert = sql(
  'tenant_quotas_upsert',
  `insert into tenant_quotas as q (tenant, max_pending_tasks, max_schedules, min_schedule_interval_seconds)
   values ($1::text, $3::int, $5::int, $7::int)
   on conflict (tenant) do update set
     max_pending_tasks = case when $2::boolean then excluded.max_pending_tasks else q.max_pending_tasks end,
     max_schedules = case when $4::boolean then excluded.max_schedules else q.max_schedules end,
     min_schedule_interval_seconds = case when $6::boolean then excluded.min_schedule_interval_seconds
                                          else q.min_schedule_interval_seconds end,
     updated_at = now()
   returning max_pending_tasks, max_schedules, min_schedule_interval_seconds`,
);

export async function setTenantQuotas(
  q: Queryable,
  p: { tenant: string; quotas: { [K in keyof StoredQuotas]?: number | null } },
): Promise<StoredQuotas> {
  const field = (k: keyof StoredQuotas) => [p.quotas[k] !== undefined, p.quotas[k] ?? null] as const;
  const rows = await q.query<QuotaRow>(tenantQuotasUpsert, [
    p.tenant,
    ...field('maxPendingTasks'),
    ...field('maxSchedules'),
    ...field('minScheduleIntervalSeconds'),
  ]);
  return quotasFromRow(rows[0]!);
}

/** A tenant's quota overrides and how many schedules it holds (reads only, locks nothing). */
const tenantQuotasGet = sql(
  'tenant_quotas_get_with_schedule_count',
  `select q.max_pending_tasks, q.max_schedules, q.min_schedule_interval_seconds, q.tenant is not null as stored,
          (select count(*)::int from schedules s where s.tenant = $1::text) as schedules
   from (select 1) one left join tenant_quotas q on q.tenant = $1::text`,
);

export async function getTenantQuotas(q: Queryable, tenant: string): Promise<{ stored: StoredQuotas | null; schedules: number }> {
  const rows = await q.query<QuotaRow & { stored: boolean; schedules: number }>(tenantQuotasGet, [tenant]);
  const r = rows[0]!;
  return { stored: r.stored ? quotasFromRow(r) : null, schedules: r.schedules };
}

/**
 * Every tenant the service knows: those with a key and those with a
 * fair-queuing row, for the admin's tenant picker; capped by `limit`.
 *
 * admin_reads_by_tenant (migration 0030): both arms read their tenant index
 * in order, merged, so the first `limit` tenants are read and no more. As a
 * `union`, PostgreSQL 15 read api_keys and tenants whole and sorted them:
 * 15-41 ms at 20,000 keys. No mutant for it: PostgreSQL 18 merges a `union`
 * too (the mutant survived there); the admin plans test, run on the
 * machine's 15 in CI, goes red.
 */
const tenantsListKnown = sql(
  'tenants_list_known',
  `select tenant from (select tenant from api_keys union all select tenant from tenants) known
   group by tenant order by tenant limit $1::int`,
);

export async function listKnownTenants(q: Queryable, p: { limit: number }): Promise<string[]> {
  const rows = await q.query<{ tenant: string }>(tenantsListKnown, [p.limit]);
  return rows.map((r) => r.tenant);
}

/** Keys, newest first; the hash is never selected. */
const apiKeysList = sql(
  'api_keys_list',
  `select id, tenant, prefix, created_at, revoked_at from api_keys
   order by id desc limit $1::int`,
);

/** One tenant's keys, newest first (api_keys_tenant_idx). */
const apiKeysListOfTenant = sql(
  'api_keys_list_of_tenant',
  `select id, tenant, prefix, created_at, revoked_at from api_keys
   where tenant = $1::text
   order by id desc limit $2::int`,
);

export async function listApiKeys(q: Queryable, p: { tenant?: string; limit: number }): Promise<ApiKeyRow[]> {
  const rows =
    p.tenant === undefined
      ? await q.query<KeyRow>(apiKeysList, [p.limit])
      : await q.query<KeyRow>(apiKeysListOfTenant, [p.tenant, p.limit]);
  return rows.map(keyFromRow);
}
