// queue: the consumer. Each message is acknowledged as soon as its own result
// is stored (or it is known to be stale), never waiting for its neighbours;
// a message whose result could not be stored is retried. If the invocation
// dies, the Queue redelivers only what was not settled.
import { consumeBatch } from '../src/consume/consume.ts';
import type { TaskMessage } from '../src/sweep/sweep.ts';
import { openDb, sharedFor } from './deps.ts';
import type { Env } from './env.ts';

/** A batch the database could not take is redelivered after this delay. */
const RETRY_DELAY_SECONDS = 10;

export async function handleQueue(batch: MessageBatch<TaskMessage>, env: Env, _ctx: ExecutionContext): Promise<void> {
  const { config, registry, log, signingSecrets } = sharedFor(env);
  const db = openDb(env);
  try {
    await consumeBatch(
      { db, config, registry, signingSecrets, log: log.child({ queue: batch.queue }) },
      batch.messages.map((m) => m.body),
      {
        onSettled(index, verdict) {
          const m = batch.messages[index]!;
          if (verdict === 'ack') m.ack();
          else m.retry({ delaySeconds: RETRY_DELAY_SECONDS });
        },
      },
    );
  } finally {
    await db.close();
  }
}
