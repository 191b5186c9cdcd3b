// queue: the consumer of the task Queue and of its dead-letter queue. Each
// task message is acknowledged as soon as its own result is stored (or it is
// known to be stale), never waiting for its neighbours; a message whose result
// could not be stored is retried, one delivered too early to wait for is
// retried with the delay left. If the invocation dies, the Queue redelivers
// only what was not settled. A dead-lettered message is logged and its task
// settled (src/consume/dead-letters.ts).
//
// A pump message (issue 13) makes this invocation a dispatcher for a while
// (src/sweep/pump.ts), beside the task messages of its batch.
import { consumeBatch } from '../src/consume/consume.ts';
import { settleDeadLetters } from '../src/consume/dead-letters.ts';
import { runPump } from '../src/sweep/pump.ts';
import { isPumpMessage, type PumpMessage, type TaskMessage } from '../src/queue/messages.ts';
import { invocationId } from '../src/sweep/sweep.ts';
import { openDb, sharedFor, tasksQueue } from './deps.ts';
import type { Env } from './env.ts';

/** A batch the database could not take is redelivered after this delay. */
const RETRY_DELAY_SECONDS = 10;
/** wrangler.toml's dead_letter_queue; DEAD_LETTER_QUEUE overrides it for a renamed queue. */
const DEFAULT_DEAD_LETTER_QUEUE = 'edge-scheduler-tasks-dlq';
/**
 * Pumps one invocation runs at once: one connection each, beside the
 * consumer's four (a Worker invocation may hold six). Further pump messages
 * of the batch are handed back to the Queue for another invocation.
 */
export const PUMPS_PER_INVOCATION = 2;

export async function handleQueue(batch: MessageBatch<TaskMessage | PumpMessage>, env: Env, _ctx: ExecutionContext): Promise<void> {
  const { config, log } = sharedFor(env);
  const deadLetters = batch.queue === ((env.DEAD_LETTER_QUEUE as string | undefined) || DEFAULT_DEAD_LETTER_QUEUE);
  const pumps = batch.messages.filter((m) => isPumpMessage(m.body));
  const tasks = batch.messages.filter((m) => !isPumpMessage(m.body));
  const work: Promise<void>[] = [];
  if (tasks.length > 0) work.push(consume(tasks, batch.queue, deadLetters, env));
  pumps.forEach((m, i) => {
    if (deadLetters) m.ack(); // a pump past its retries: the next sweep fans out again
    else if (i >= PUMPS_PER_INVOCATION) m.retry({ delaySeconds: 0 });
    else {
      work.push(
        (async () => {
          const db = openDb(env, 'sweep', 1);
          const workerId = invocationId('pump');
          const pumpLog = log.child({ workerId });
          try {
            const counts = await runPump({ db, config, sender: tasksQueue(env), pumps: tasksQueue(env), log: pumpLog, workerId });
            pumpLog.info('pump', { ...counts });
          } catch (error) {
            // Claims it could not send are given back; the next sweep fans out again.
            pumpLog.error('pump failed', { error });
          } finally {
            m.ack();
            await db.close();
          }
        })(),
      );
    }
  });
  await Promise.all(work);
}

async function consume(messages: readonly Message<TaskMessage | PumpMessage>[], queue: string, deadLetters: boolean, env: Env): Promise<void> {
  const { config, registry, log, signingSecrets } = sharedFor(env);
  const db = openDb(env, 'consumer');
  try {
    const settle = (index: number, verdict: 'ack' | 'retry', retryDelaySeconds?: number) => {
      const m = messages[index]!;
      if (verdict === 'ack') m.ack();
      else m.retry({ delaySeconds: retryDelaySeconds ?? RETRY_DELAY_SECONDS });
    };
    const bodies = messages.map((m) => m.body);
    const queueLog = log.child({ queue });
    if (deadLetters) {
      const { verdicts } = await settleDeadLetters({ db, log: queueLog }, bodies, {
        deliveries: messages.map((m) => m.attempts),
      });
      verdicts.forEach((v, i) => settle(i, v));
    } else {
      await consumeBatch({ db, config, registry, signingSecrets, log: queueLog }, bodies, { onSettled: settle });
    }
  } finally {
    await db.close();
  }
}
