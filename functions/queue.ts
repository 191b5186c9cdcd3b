// queue: the consumer. Each message is acknowledged only once its result is
// stored (or it is known to be stale); otherwise the Queue redelivers it.
import { consumeBatch } from '../src/consume/consume.ts';
import type { TaskMessage } from '../src/sweep/sweep.ts';
import { openDb, sharedFor } from './deps.ts';
import type { Env } from './env.ts';

/** A batch the database could not take is redelivered after this delay. */
const RETRY_DELAY_SECONDS = 10;

export async function handleQueue(batch: MessageBatch<TaskMessage>, env: Env, _ctx: ExecutionContext): Promise<void> {
  const { config, registry, log } = sharedFor(env);
  const db = openDb(env, 'consumer');
  try {
    const { verdicts } = await consumeBatch(
      { db, config, registry, log: log.child({ queue: batch.queue }) },
      batch.messages.map((m) => m.body),
    );
    batch.messages.forEach((m, i) => {
      if (verdicts[i] === 'ack') m.ack();
      else m.retry({ delaySeconds: RETRY_DELAY_SECONDS });
    });
  } finally {
    await db.close();
  }
}
