// The dispatch kick's probe (src/sweep/kick.ts).
import type { Queryable } from '../seam.ts';
import { sql } from '../seam.ts';

/**
 * Is a claim at work on this queue right now? Every claim (a sweep's or a
 * kick's) updates the queue's row (its virtual clock) and holds that row until
 * it commits; SKIP LOCKED then returns nothing, and the kick leaves instead of
 * queueing behind it. Locks the row only for this statement and guards nothing
 * by itself: a claim that starts just after the probe merely waits for the
 * other, as every claim did before. A queue without a row has had no claim
 * and no contention: free.
 */
const queuesProbeClaimFree = sql(
  'queues_probe_claim_free',
  `select not exists (select 1 from queues where name = $1::text)
          or exists (select 1 from (select 1 from queues where name = $1::text for update skip locked) free) as free`,
);

export async function isClaimFree(q: Queryable, queue: string): Promise<boolean> {
  const rows = await q.query<{ free: boolean }>(queuesProbeClaimFree, [queue]);
  return rows[0]?.free === true;
}
