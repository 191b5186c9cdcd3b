// Concurrency slots (issue 16): what a tenant's keys hold. The claim and the
// trigger of migration 0016 write them; this file only reads.
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
 * One key of one tenant: its slot row (no lock) and its parked tasks,
 * counted on tasks_parked_idx.
 */
const concurrencySlotGet = sql(
  'concurrency_slot_get',
  `select s.key, s.running, s.max_running,
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
