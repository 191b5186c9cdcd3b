// Concurrency slots and rate limits (issue 16): what a tenant's keys hold.
// The claim and the fenced start write them, and every statement that takes a
// task out of `running` frees its slot (freeSlotsOf); this file only reads.
import type { Queryable } from '../seam.ts';
import { sql } from '../seam.ts';

/**
 * The slot freeing of every set-based statement that takes tasks out of
 * `running` (migration 0020; the enqueue's ON CONFLICT calls the function
 * itself): CTE `slots_freed` gives back one slot per row of `left` (columns
 * tenant, concurrency_key), which must hold exactly the rows the statement
 * took out of `running`, as they were (a key they carried then). One call of
 * concurrency_slots_free per key: a ledger insert, and the wake of as many
 * parked tasks. The group by reads `left` whole before the first call, so
 * the wake runs after the statement's own writes to those rows. The
 * statement must read `slots_freed` (a CTE nobody reads never runs).
 */
export const freeSlotsOf = (left: string) => `slots_freed as (
     select count(concurrency_slots_free(f.tenant, f.key, f.n, null)) as keys
     from (select l.tenant, l.concurrency_key as key, count(*)::int as n from ${left} l
           where l.concurrency_key is not null
           group by l.tenant, l.concurrency_key
           order by l.tenant, l.concurrency_key) f
   )`;

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
