// Concurrency slots and rate limits (issue 16): what a tenant's keys hold.
// The claim, the fenced start and the trigger of migration 0016 write them;
// this file only reads.
import type { Queryable } from '../seam.ts';
import { sql } from '../seam.ts';

export interface ConcurrencySlot {
  key: string;
  running: number;
  limit: number;
  /** Tasks waiting for a slot of this key (parked by the claim). */
  waiting: number;
}

/**
 * One key of one tenant: its slot row (no lock) less the frees no claim has
 * counted yet (migration 0018), and its parked tasks, counted on
 * tasks_parked_idx.
 */
const concurrencySlotGet = sql(
  'concurrency_slot_get',
  `select s.key,
          greatest(0, s.running - coalesce((select sum(f.n)::int from concurrency_frees f
                                            where f.tenant = s.tenant and f.key = s.key), 0)) as running,
          s.max_running,
          (select count(*)::int from tasks p
           where p.status = 'queued' and p.parked and p.tenant = s.tenant and p.concurrency_key = s.key) as waiting
   from concurrency_slots s
   where s.tenant = $1::text and s.key = $2::text`,
);

export async function getConcurrencySlot(q: Queryable, p: { tenant: string; key: string }): Promise<ConcurrencySlot | null> {
  const rows = await q.query<{ key: string; running: number; max_running: number; waiting: number }>(concurrencySlotGet, [
    p.tenant,
    p.key,
  ]);
  const r = rows[0];
  return r ? { key: r.key, running: r.running, limit: r.max_running, waiting: r.waiting } : null;
}

export interface RateLimitState {
  key: string;
  limit: number;
  periodSeconds: number;
  /** The earliest instant the key's next task may start; null: now. */
  nextStartAt: Date | null;
  /** Tasks of this key that have not started (scheduled, queued, or claimed and not started). */
  waiting: number;
}

/**
 * One rate-limited key of one tenant: its line (no lock) and its tasks not
 * started yet (the count reads the tenant's pending tasks, index-assisted by
 * tasks_pending_tenant_idx; a debugging read, not a hot path).
 */
const rateLimitGet = sql(
  'rate_limit_get',
  `select l.key, l.max_starts, l.period_seconds,
          case when l.next_start_at > coalesce($3::timestamptz, now()) then l.next_start_at end as next_start_at,
          (select count(*)::int from tasks p
           where p.tenant = l.tenant and p.rate_key = l.key and p.status in ('scheduled', 'queued', 'running')
             and p.started_at is null) as waiting
   from rate_limits l
   where l.tenant = $1::text and l.key = $2::text`,
);

export async function getRateLimit(q: Queryable, p: { tenant: string; key: string; now?: Date }): Promise<RateLimitState | null> {
  const rows = await q.query<{ key: string; max_starts: number; period_seconds: number; next_start_at: Date | null; waiting: number }>(
    rateLimitGet,
    [p.tenant, p.key, p.now ?? null],
  );
  const r = rows[0];
  return r
    ? { key: r.key, limit: r.max_starts, periodSeconds: r.period_seconds, nextStartAt: r.next_start_at, waiting: r.waiting }
    : null;
}
