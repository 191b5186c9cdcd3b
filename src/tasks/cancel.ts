// Cancel: allowed until the handler starts, including a task already handed
// to the Queue with a delay (the consumer's fenced start then skips it).
import type { Queryable } from '../db/seam.ts';
import { cancelTaskIfNotStarted, getTask, getTaskByKey } from '../db/sql/tasks-read.ts';
import { conflict, notFound } from '../errors.ts';
import type { Task } from '../db/sql/taskRows.ts';

export type TaskRef = { id: string } | { idempotencyKey: string };

export async function cancelTask(db: Queryable, tenant: string, ref: TaskRef, now?: Date): Promise<Task> {
  const cancelled = await cancelTaskIfNotStarted(db, { now, tenant, ...ref });
  if (cancelled) return cancelled;
  // Nothing changed: say why, without revealing other tenants' tasks.
  const current = 'id' in ref ? await getTask(db, tenant, ref.id) : await getTaskByKey(db, tenant, ref.idempotencyKey);
  if (!current) throw notFound('task');
  if (current.status === 'cancelled') return current; // cancelling twice is harmless
  throw conflict(
    current.status === 'running' ? 'the task has already started' : `the task is already ${current.status}`,
  );
}
