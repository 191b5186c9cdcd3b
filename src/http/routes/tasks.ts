// /v1/tasks: enqueue and read tasks, always scoped to the caller's tenant.
import { createRoute, z } from '@hono/zod-openapi';
import { getTask, listTasks } from '../../db/sql/tasks-read.ts';
import { notFound } from '../../errors.ts';
import { cancelTask } from '../../tasks/cancel.ts';
import { enqueueTasks, type EnqueueResult } from '../../tasks/enqueue.ts';
import type { App, AppDeps } from '../context.ts';
import { kickDueQueues } from '../kick.ts';
import { commonErrors, conflictError, json, jsonBody, quotaError } from './common.ts';
import { isStorableText } from '../hostile-json.ts';
import { ErrorSchema, IdParam } from '../schemas/common.ts';
import {
  SpentTaskSchema,
  TaskBatchSchema,
  TaskCreateSchema,
  TaskListQuery,
  TaskPageSchema,
  taskJson,
  taskPaging,
  TaskSchema,
  toTaskInput,
} from '../schemas/tasks.ts';

const createTaskRoute = createRoute({
  method: 'post',
  path: '/v1/tasks',
  summary: 'Enqueue a task',
  request: jsonBody(TaskCreateSchema),
  responses: {
    201: json(TaskSchema, 'Created'),
    200: json(z.union([TaskSchema, SpentTaskSchema]), 'Idempotency key seen: rescheduled while waiting, or deduplicated once spent'),
    ...commonErrors,
    ...conflictError('The idempotency key is held by a task of another task type or queue'),
    413: json(ErrorSchema, 'Body too large'),
    ...quotaError('maxPendingTasks'),
  },
});

const getTaskRoute = createRoute({
  method: 'get',
  path: '/v1/tasks/{id}',
  summary: 'Get a task',
  request: { params: IdParam },
  responses: { 200: json(TaskSchema, 'The task'), ...commonErrors, 404: json(ErrorSchema, 'No such task for this tenant') },
});

const cancelTaskRoute = createRoute({
  method: 'delete',
  path: '/v1/tasks/{id}',
  summary: 'Cancel a task that has not started',
  request: { params: IdParam },
  responses: {
    200: json(TaskSchema, 'Cancelled (or already cancelled)'),
    ...commonErrors,
    404: json(ErrorSchema, 'No such task for this tenant'),
    ...conflictError('The task has started or finished'),
  },
});

const cancelTaskByKeyRoute = createRoute({
  method: 'delete',
  path: '/v1/tasks/by-key/{idempotencyKey}',
  summary: 'Cancel a task by its idempotency key',
  request: {
    params: z.object({
      idempotencyKey: z
        .string()
        .min(1)
        .max(256)
        .refine(isStorableText, 'no NUL (\\u0000) or lone surrogates')
        .openapi({ param: { name: 'idempotencyKey', in: 'path' } }),
    }),
  },
  responses: {
    200: json(TaskSchema, 'Cancelled (or already cancelled)'),
    ...commonErrors,
    404: json(ErrorSchema, 'No task with this key for this tenant'),
    ...conflictError('The task has started or finished'),
  },
});

const createTaskBatchRoute = createRoute({
  method: 'post',
  path: '/v1/tasks/batch',
  summary: 'Enqueue up to 1,000 tasks in one round trip, all or nothing',
  request: jsonBody(TaskBatchSchema),
  responses: {
    201: json(z.object({ tasks: z.array(z.union([TaskSchema, SpentTaskSchema])) }).openapi('TaskBatchResult'), 'Written, in input order'),
    200: json(z.object({ tasks: z.array(z.union([TaskSchema, SpentTaskSchema])) }), 'Every item hit an existing idempotency key'),
    ...commonErrors,
    ...conflictError('An idempotency key is held by a task of another task type or queue'),
    413: json(ErrorSchema, 'Body or a payload too large'),
    ...quotaError('maxPendingTasks; the whole batch is refused'),
  },
});

const listTasksRoute = createRoute({
  method: 'get',
  path: '/v1/tasks',
  summary: 'List tasks, newest first, with keyset pagination',
  request: { query: TaskListQuery },
  responses: { 200: json(TaskPageSchema, 'A page of tasks'), ...commonErrors },
});

const taskIdOf = (r: EnqueueResult) => (r.task === null ? r.spent.taskId : r.task.id);

export function resultJson(r: EnqueueResult) {
  if (r.task === null) {
    return { id: r.spent.taskId, status: r.spent.status, idempotencyKey: r.spent.idempotencyKey, deduplicated: true as const, purged: true as const };
  }
  return r.outcome === 'deduplicated' ? { ...taskJson(r.task), deduplicated: true } : taskJson(r.task);
}

export function registerTaskRoutes(app: App, deps: AppDeps): void {
  app.openapi(createTaskRoute, async (c) => {
    const body = c.req.valid('json');
    const [result] = await enqueueTasks({ db: c.env.db, config: deps.config, registry: deps.registry }, c.var.tenant, [toTaskInput(body)], {
      now: c.env.now,
      pathOf: () => '',
      trace: c.var.trace,
    });
    if (c.var.trace) c.var.log.info('task enqueued', { taskId: taskIdOf(result!), outcome: result!.outcome });
    kickDueQueues(deps, c.env, [result!], c.var.log);
    return result!.outcome === 'created' ? c.json(resultJson(result!) as never, 201) : c.json(resultJson(result!) as never, 200);
  });

  app.openapi(createTaskBatchRoute, async (c) => {
    const { tasks } = c.req.valid('json');
    const results = await enqueueTasks(
      { db: c.env.db, config: deps.config, registry: deps.registry },
      c.var.tenant,
      tasks.map(toTaskInput),
      { now: c.env.now, pathOf: (i) => `tasks.${i}`, trace: c.var.trace },
    );
    if (c.var.trace) c.var.log.info('tasks enqueued', { taskIds: results.map(taskIdOf) });
    kickDueQueues(deps, c.env, results, c.var.log);
    const body = { tasks: results.map(resultJson) };
    return results.some((r) => r.outcome === 'created') ? c.json(body as never, 201) : c.json(body as never, 200);
  });

  app.openapi(listTasksRoute, async (c) => {
    const q = c.req.valid('query');
    const { page, nextCursor } = await taskPaging.read(
      q,
      (beforeId, limit) =>
        listTasks(c.env.db, c.var.tenant, {
          queue: q.queue,
          statuses: q.status?.split(','),
          task: q.task,
          createdAfter: q.createdAfter ? new Date(q.createdAfter) : undefined,
          createdBefore: q.createdBefore ? new Date(q.createdBefore) : undefined,
          beforeId,
          limit,
        }),
      (t) => t.id,
    );
    return c.json({ tasks: page.map(taskJson), nextCursor }, 200);
  });

  app.openapi(cancelTaskRoute, async (c) => {
    const task = await cancelTask(c.env.db, c.var.tenant, { id: c.req.valid('param').id }, c.env.now);
    return c.json(taskJson(task), 200);
  });

  app.openapi(cancelTaskByKeyRoute, async (c) => {
    const task = await cancelTask(c.env.db, c.var.tenant, { idempotencyKey: c.req.valid('param').idempotencyKey }, c.env.now);
    return c.json(taskJson(task), 200);
  });

  app.openapi(getTaskRoute, async (c) => {
    const task = await getTask(c.env.db, c.var.tenant, c.req.valid('param').id);
    if (!task) throw notFound('task');
    return c.json(taskJson(task), 200);
  });
}
