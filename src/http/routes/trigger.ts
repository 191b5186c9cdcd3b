// POST /v1/schedules/{name}/trigger: run a schedule now (issue 15).
import { createRoute, z } from '@hono/zod-openapi';
import { triggerSchedule } from '../../schedules/trigger.ts';
import type { App, AppDeps } from '../context.ts';
import { ScheduleName } from '../schemas/schedules.ts';
import { TaskSchema, taskJson } from '../schemas/tasks.ts';
import { commonErrors, conflictError, json, notFoundError, quotaError } from './common.ts';
import { kickDueQueues } from '../kick.ts';

const triggerRoute = createRoute({
  method: 'post',
  path: '/v1/schedules/{name}/trigger',
  summary: "Run a schedule now: one occurrence due now; the schedule's next fire time stays (paused schedules too)",
  request: { params: z.object({ name: ScheduleName }) },
  responses: {
    201: json(TaskSchema, 'The occurrence'),
    ...commonErrors,
    ...notFoundError('schedule'),
    ...conflictError('Too many concurrent triggers of this schedule; try again'),
    ...quotaError('maxPendingTasks'),
  },
});

export function registerTriggerRoutes(app: App, deps: AppDeps): void {
  app.openapi(triggerRoute, async (c) => {
    const task = await triggerSchedule({ db: c.env.db, config: deps.config }, c.var.tenant, c.req.valid('param').name, c.env.now);
    kickDueQueues(deps, c.env, [{ outcome: 'created', task }], c.var.log);
    return c.json(taskJson(task), 201);
  });
}
