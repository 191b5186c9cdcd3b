// The dead-letter queue's consumer inside workerd: each dead-lettered message
// is acknowledged and its task settled through the fenced finish; a stale or
// malformed one changes nothing, nor does one whose at-most-once task never
// started (the reaper requeues it).
import { createExecutionContext, createMessageBatch, getQueueResult, waitOnExecutionContext } from 'cloudflare:test';
import { env } from 'cloudflare:workers';
import { describe, expect, it } from 'vitest';
import worker from '../../functions/index.ts';
import { readConfig } from '../../src/config.ts';
import { createNeonDb } from '../../src/db/neon.ts';
import { silentLogger } from '../../src/log.ts';
import { promoteDueTasks } from '../../src/db/sql/tasks-maintenance.ts';
import type { TaskMessage } from '../../src/queue/messages.ts';
import { dispatchRunnable } from '../../src/sweep/sweep.ts';
import { api, getTask } from '../helpers/workerd.ts';

const DLQ = 'edge-scheduler-tasks-dlq';
const TENANT = 'worker-dlq';

/**
 * Tasks claimed and "sent" for real, except that their messages are kept
 * here instead of reaching the task Queue: as if the consumer had failed them
 * until the Queue dead-lettered them.
 */
async function dispatchedTasks(inputs: object[]): Promise<{ ids: string[]; messages: TaskMessage[] }> {
  const queue = `dlq-${crypto.randomUUID().slice(0, 8)}`;
  // Far enough out that no enqueue kick dispatches them; then made due, promoted and claimed here.
  const ids: string[] = [];
  for (const input of inputs) ids.push((await api('POST', '/v1/tasks', { tenant: TENANT, body: { task: 'noop', queue, delay: 3600, ...input } })).body.id);
  const messages: TaskMessage[] = [];
  const db = createNeonDb({ connectionString: env.DATABASE_URL, wsProxy: env.DATABASE_WS_PROXY });
  try {
    await db.query(`update tasks set run_at = now() - interval '1 second' where id = any($1::bigint[])`, [ids]);
    await promoteDueTasks(db, { lookaheadSeconds: 0, limit: 10_000 });
    const sender = { sendBatch: async (batch: Iterable<{ body: TaskMessage }>) => void messages.push(...[...batch].map((m) => m.body)) };
    await dispatchRunnable({ db, config: readConfig(env), log: silentLogger, workerId: 'test-dlq', sender }, { queues: [queue] });
  } finally {
    await db.close();
  }
  return { ids, messages };
}

async function deliverToDeadLetterQueue(bodies: unknown[]) {
  const batch = createMessageBatch(DLQ, bodies.map((body, i) => ({ id: `dlq-${i}`, timestamp: new Date(), attempts: 11, body })));
  const ctx = createExecutionContext();
  await worker.queue(batch as never, env as never, ctx);
  await waitOnExecutionContext(ctx);
  return getQueueResult(batch, ctx);
}

describe('the dead-letter queue consumer', () => {
  it('acknowledges every message and settles its task: at-least-once retries; at-most-once never started is left for the reaper', async () => {
    const { ids, messages } = await dispatchedTasks([{ maxAttempts: 3 }, { delivery: 'at_most_once' }, { maxAttempts: 1 }]);
    expect(messages).toHaveLength(3);
    const byId = new Map(messages.map((m) => [m.id, m]));
    const result = await deliverToDeadLetterQueue([byId.get(ids[0]!), byId.get(ids[1]!), byId.get(ids[2]!), { not: 'a task message' }]);
    expect(result.explicitAcks.sort()).toEqual(['dlq-0', 'dlq-1', 'dlq-2', 'dlq-3']);
    expect(result.retryMessages).toEqual([]);

    const [retried, atMostOnce, spent] = await Promise.all(ids.map((id) => getTask(id, TENANT)));
    expect(retried).toMatchObject({ status: 'scheduled', attempts: 1 });
    expect(retried.lastError).toMatch(/dead-lettered/);
    // Its fenced start never committed, so no handler ran: not dead; still
    // claimed (shown waiting) until the reaper gives it back, attempt unspent.
    expect(atMostOnce).toMatchObject({ status: 'queued', lastError: null, finishedAt: null });
    expect(spent).toMatchObject({ status: 'dead', attempts: 1 });
  });

  it('leaves a task alone when its message is stale (the fence holds)', async () => {
    const { ids, messages } = await dispatchedTasks([{}]);
    expect(messages).toHaveLength(1);
    const stale = { ...messages[0]!, epoch: messages[0]!.epoch + 5 };
    const result = await deliverToDeadLetterQueue([stale]);
    expect(result.explicitAcks).toEqual(['dlq-0']);
    // Still claimed and not started: shown as waiting, its claim in `dispatch`.
    expect(await getTask(ids[0]!, TENANT)).toMatchObject({
      status: 'queued',
      lastError: null,
      dispatch: { epoch: messages[0]!.epoch },
    });
  });
});
