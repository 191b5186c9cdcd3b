// Bulk cancel (issue 15): a tenant's tasks matching a filter that have not
// started, the same guard as DELETE /v1/tasks/{id}, in bounded statements.
import type { Queryable } from '../db/seam.ts';
import { cancelMatchingTasks } from '../db/sql/bulkCancel.ts';
import { BULK_BATCH_SIZE, type TaskMatch } from '../db/sql/replay.ts';

/**
 * Cancels up to `limit` matching tasks, in statements of at most
 * BULK_BATCH_SIZE; the ids cancelled, ascending. A cancelled task is
 * terminal, so calling again with the same filter continues where this
 * call stopped.
 */
export async function cancelMatching(db: Queryable, tenant: string, match: TaskMatch, limit: number, now?: Date): Promise<string[]> {
  const ids: string[] = [];
  let afterId: string | null = null;
  while (ids.length < limit) {
    const want = Math.min(BULK_BATCH_SIZE, limit - ids.length);
    const batch = await cancelMatchingTasks(db, { now, tenant, match, afterId, limit: want });
    ids.push(...batch);
    if (batch.length < want) break;
    afterId = batch.at(-1)!;
  }
  return ids;
}
