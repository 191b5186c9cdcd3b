// Work enqueued due now should not wait for the next cron tick: after the
// response, the routes that create tasks (enqueue, replay, trigger) kick the
// tasks' queues (sweep/kick.ts: debounced per isolate and queue, and leaving
// at once when another claim of the queue is at work).
import type { Logger } from '../log.ts';
import { queuesToKick } from '../sweep/kick.ts';
import type { EnqueueResult } from '../tasks/enqueue.ts';
import type { AppDeps, Invocation } from './context.ts';

export function kickDueQueues(deps: AppDeps, inv: Invocation, results: readonly EnqueueResult[], log: Logger): void {
  const queues = queuesToKick(results);
  if (queues.length === 0 || !deps.kicker) return;
  deps.kicker.kick({ db: inv.db, config: deps.config, sender: inv.sender, pumps: inv.pumps, log, waitUntil: inv.waitUntil, now: inv.now }, queues);
}
