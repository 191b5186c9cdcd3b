// queue: the consumer of the task Queue and of its dead-letter queue. Each
// task message is acknowledged as soon as its own result is stored (or it is
// known to be stale), never waiting for its neighbours; a message whose result
// could not be stored is retried, one delivered too early to wait for is
// retried with the delay left. If the invocation dies, the Queue redelivers
// only what was not settled. A dead-lettered message is logged and its task
// settled (src/consume/dead-letters.ts).
import { consumeBatch } from '../src/consume/consume.ts';
import { settleDeadLetters } from '../src/consume/dead-letters.ts';
import type { TaskMessage } from '../src/sweep/sweep.ts';
import { openDb, sharedFor } from './deps.ts';
import type { Env } from './env.ts';

/** A batch the database could not take is redelivered after this delay. */
const RETRY_DELAY_SECONDS = 10;
/** wrangler.toml's dead_letter_queue; DEAD_LETTER_QUEUE overrides it for a renamed queue. */
const DEFAULT_DEAD_LETTER_QUEUE = 'edge-scheduler-tasks-dlq';

export async function handleQueue(batch: MessageBatch<TaskMessage>, env: Env, _ctx: ExecutionContext): Promise<void> {
  const { config, registry, log, signingSecrets } = sharedFor(env);
  const db = openDb(env, 'consumer');
  try {
    const settle = (index: number, verdict: 'ack' | 'retry', retryDelaySeconds?: number) => {
      const m = batch.messages[index]!;
      if (verdict === 'ack') m.ack();
      else m.retry({ delaySeconds: retryDelaySeconds ?? RETRY_DELAY_SECONDS });
    };
    const bodies = batch.messages.map((m) => m.body);
    const queueLog = log.child({ queue: batch.queue });
    if (batch.queue === ((env.DEAD_LETTER_QUEUE as string | undefined) || DEFAULT_DEAD_LETTER_QUEUE)) {
      const { verdicts } = await settleDeadLetters({ db, log: queueLog }, bodies, {
        deliveries: batch.messages.map((m) => m.attempts),
      });
      verdicts.forEach((v, i) => settle(i, v));
    } else {
      await consumeBatch({ db, config, registry, signingSecrets, log: queueLog }, bodies, { onSettled: settle });
    }
  } finally {
    await db.close();
  }
}
