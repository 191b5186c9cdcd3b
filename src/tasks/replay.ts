// Replay (issue 15): a terminal task (succeeded, dead, cancelled, missed)
// becomes a new task with the same type, payload, queue and options; the
// original never changes. A task has at most one replay (migration 0014):
// replaying it again answers its existing replay, so a retried request never
// makes two; to run it once more, replay the replay.
//
// Quota (maxPendingTasks): every replay is a new pending task, counted by
// the replay statement itself like an enqueue's (429 quota_exceeded, the
// statement's batch refused whole). A bulk replay refused in a later batch
// keeps the batches before it; calling again continues from there.
import type { Config } from '../config.ts';
import type { Queryable } from '../db/seam.ts';
import { getTask } from '../db/sql/tasks-read.ts';
import { BULK_BATCH_SIZE, getReplayOf, REPLAYABLE_STATUSES, replayTerminalTasks, type TaskMatch } from '../db/sql/replay.ts';
import { conflict, notFound } from '../errors.ts';
import type { Task } from '../db/sql/taskRows.ts';

export interface ReplayDeps {
  db: Queryable;
  config: Config;
}

/** When the replay is due: now (both unset), at `runAt`, or `delay` seconds from now. */
export interface ReplayTiming {
  runAt?: Date;
  delay?: number;
}

export type ReplayResult = { outcome: 'created' | 'existing'; task: Task };

export async function replayTask(deps: ReplayDeps, tenant: string, id: string, timing: ReplayTiming = {}, now?: Date): Promise<ReplayResult> {
  const [created] = await replayTerminalTasks(deps.db, {
    now,
    tenant,
    lookaheadSeconds: deps.config.lookaheadSeconds,
    match: { ids: [id] },
    limit: 1,
    runAt: timing.runAt ?? null,
    delayMs: timing.runAt ? null : Math.round((timing.delay ?? 0) * 1000),
    maxPendingTasks: deps.config.quotaMaxPendingTasks,
  });
  if (created) return { outcome: 'created', task: created };
  // Nothing was written: say why, without revealing other tenants' tasks.
  const original = await getTask(deps.db, tenant, id);
  if (!original) throw notFound('task');
  if (!(REPLAYABLE_STATUSES as readonly string[]).includes(original.status)) {
    throw conflict(`only a finished task can be replayed; this one is ${original.status}`);
  }
  const existing = await getReplayOf(deps.db, tenant, id);
  if (existing) return { outcome: 'existing', task: existing };
  // The original was purged between the two reads.
  throw notFound('task');
}

export interface BulkReplayResult {
  /** The originals replayed, ascending. */
  ids: string[];
  /** Their replays, in the same order. */
  replays: Task[];
}

/**
 * Replays up to `limit` matching terminal tasks that have no replay yet, in
 * statements of at most BULK_BATCH_SIZE. Calling again with the same filter
 * continues where this call stopped.
 */
export async function replayMatching(
  deps: ReplayDeps,
  tenant: string,
  match: TaskMatch,
  limit: number,
  now?: Date,
): Promise<BulkReplayResult> {
  const replays: Task[] = [];
  let afterId: string | null = null;
  while (replays.length < limit) {
    const want = Math.min(BULK_BATCH_SIZE, limit - replays.length);
    const batch = await replayTerminalTasks(deps.db, {
      now,
      tenant,
      lookaheadSeconds: deps.config.lookaheadSeconds,
      match,
      afterId,
      limit: want,
      maxPendingTasks: deps.config.quotaMaxPendingTasks,
    });
    replays.push(...batch);
    if (batch.length < want) break;
    afterId = batch.at(-1)!.replayOf;
  }
  return { ids: replays.map((r) => r.replayOf!), replays };
}
