// The dead-letter queue's consumer (issue 10, finding 7). A message lands
// there after the task consumer asked for its redelivery `max_retries` times:
// the database could not take its fenced start or finish. Nothing would ever
// look at it again, so each one is logged and its task settled here.
//
// Settling: the attempt the message carried counts as failed, through the
// same fenced finish the consumer uses (one statement for the whole batch,
// only where the task is still `running` at the message's epoch). So an
// at-least-once task retries after its backoff (or ends `dead` with its
// attempts spent), and an at-most-once task that started ends `dead` (its
// handler may have run; it is never handed off again). An at-most-once task
// whose fenced start never committed ran no handler: the finish leaves it
// running, and the reaper gives it back to `queued` with its attempt unspent
// when its lease runs out, as for any sent task that never started
// (README, Guarantees). A task that moved on
// (finished, cancelled, reaped and claimed again) is left alone: the fence
// holds. If the database is still unreachable the DLQ redelivers the batch;
// past its own retries the reaper settles the task when its lease expires.
import type { Db } from '../db/seam.ts';
import { finishIfRunning } from '../db/sql/tasks-fence.ts';
import type { Logger } from '../log.ts';
import { parseTaskMessage, type TaskMessage } from '../queue/messages.ts';
import type { Verdict } from './consume.ts';

export const DEAD_LETTER_ERROR = 'the consumer could not record this attempt (its message was dead-lettered)';

export interface DeadLetterOutcome {
  verdicts: Verdict[];
  /** Tasks settled by this batch, with their new status. */
  settled: { id: string; status: string }[];
  /** Messages whose task had already moved on (or that were malformed). */
  skipped: number;
}

export async function settleDeadLetters(
  deps: { db: Db; log: Logger },
  bodies: readonly unknown[],
  options: { now?: Date; deliveries?: readonly number[] } = {},
): Promise<DeadLetterOutcome> {
  const { db, log } = deps;
  const messages = bodies.map(parseTaskMessage);
  messages.forEach((m, i) => {
    if (m) log.error('task message dead-lettered', { taskId: m.id, epoch: m.epoch, deliveries: options.deliveries?.[i] });
    else log.error('malformed message dead-lettered and dropped', { index: i, body: bodies[i] });
  });
  const unique = [...new Map(messages.filter((m): m is TaskMessage => m !== null).map((m) => [`${m.id}:${m.epoch}`, m])).values()];
  if (unique.length === 0) return { verdicts: bodies.map(() => 'ack'), settled: [], skipped: bodies.length };
  try {
    const { finished, lost } = await finishIfRunning(db, {
      now: options.now,
      results: unique.map((m) => ({ id: m.id, epoch: m.epoch, outcome: 'failed' as const, error: DEAD_LETTER_ERROR, retryDelayMs: null })),
    });
    for (const f of finished) log.warn('dead-lettered task settled', { taskId: f.id, status: f.status });
    for (const l of lost) {
      if (l.currentEpoch === l.epoch && l.currentStatus === 'running') log.warn('dead-lettered task never started; left for the reaper to requeue', { taskId: l.id, epoch: l.epoch });
      else log.info('dead-lettered message was stale; task left as it is', { taskId: l.id, epoch: l.epoch, currentStatus: l.currentStatus });
    }
    return {
      verdicts: bodies.map(() => 'ack'),
      settled: finished.map((f) => ({ id: f.id, status: f.status })),
      skipped: bodies.length - finished.length,
    };
  } catch (error) {
    log.error('dead letters not settled; batch left for redelivery', { error });
    return { verdicts: bodies.map(() => 'retry'), settled: [], skipped: 0 };
  }
}
