// scheduled: one sweep per cron tick.
import { sweepOnce } from '../src/sweep/sweep.ts';
import { invocationId } from '../src/sweep/sweep.ts';
import { openDb, sharedFor, tasksQueue } from './deps.ts';
import type { Env } from './env.ts';

export async function handleScheduled(controller: ScheduledController, env: Env, _ctx: ExecutionContext): Promise<void> {
  const { config, log } = sharedFor(env);
  const db = openDb(env, 'sweep');
  const workerId = invocationId('cron');
  try {
    const counts = await sweepOnce({ db, config, sender: tasksQueue(env), pumps: tasksQueue(env), log: log.child({ workerId }), workerId });
    log.info('sweep', { cron: controller.cron, workerId, ...counts });
  } finally {
    await db.close();
  }
}
