// Replay and bulk actions on a tenant's tasks (issue 15):
// POST /v1/tasks/{id}/replay, /v1/tasks/bulk-cancel, /v1/tasks/bulk-replay.
import { createRoute } from '@hono/zod-openapi';
import type { TaskMatch } from '../../db/sql/replay.ts';
import { cancelMatching } from '../../tasks/bulkCancel.ts';
import { replayMatching, replayTask } from '../../tasks/replay.ts';
import type { App, AppDeps } from '../context.ts';
import { listAttempts } from '../../db/sql/attempts.ts';
import {
  AttemptListSchema,
  BulkCancelSchema,
  BulkReplayResultSchema,
  BulkReplaySchema,
  BulkResultSchema,
  DEFAULT_BULK_LIMIT,
  ReplaySchema,
  type BulkFilter,
} from '../schemas/replay.ts';
import { IdParam } from '../schemas/common.ts';
import { TaskSchema, taskJson } from '../schemas/tasks.ts';
import { notFound } from '../../errors.ts';
import { commonErrors, conflictError, json, notFoundError, quotaError } from './common.ts';
import { kickDueQueues } from '../kick.ts';

const routes = {
  attempts: createRoute({
    method: 'get',
    path: '/v1/tasks/{id}/attempts',
    summary: "A task's attempts, oldest first: outcome, times, error and (http tasks) the response status",
    request: { params: IdParam },
    responses: { 200: json(AttemptListSchema, 'The attempts'), ...commonErrors, ...notFoundError('task for this tenant') },
  }),
  replay: createRoute({
    method: 'post',
    path: '/v1/tasks/{id}/replay',
    summary: 'Replay a finished task as a new task (same type, payload, queue and options)',
    request: {
      params: IdParam,
      body: { content: { 'application/json': { schema: ReplaySchema } }, required: false },
    },
    responses: {
      201: json(TaskSchema, 'The new task (replayOf names the original)'),
      200: json(TaskSchema, 'The task was already replayed: its replay (a task has at most one)'),
      ...commonErrors,
      ...notFoundError('task for this tenant'),
      ...conflictError('The task has not finished'),
      ...quotaError('maxPendingTasks'),
    },
  }),
  bulkCancel: createRoute({
    method: 'post',
    path: '/v1/tasks/bulk-cancel',
    summary: 'Cancel the matching tasks that have not started, up to limit',
    request: { body: { content: { 'application/json': { schema: BulkCancelSchema } }, required: true } },
    responses: { 200: json(BulkResultSchema, 'The tasks cancelled'), ...commonErrors },
  }),
  bulkReplay: createRoute({
    method: 'post',
    path: '/v1/tasks/bulk-replay',
    summary: 'Replay the matching finished tasks that have no replay yet, up to limit',
    request: { body: { content: { 'application/json': { schema: BulkReplaySchema } }, required: true } },
    responses: {
      200: json(BulkReplayResultSchema, 'The tasks replayed and their replays'),
      ...commonErrors,
      ...quotaError('maxPendingTasks; the batch of up to 1,000 that would pass it is refused whole, earlier batches stay replayed'),
    },
  }),
};

function matchOf(b: BulkFilter): TaskMatch {
  return {
    ids: b.ids,
    queue: b.queue,
    statuses: b.status,
    task: b.task,
    createdAfter: b.createdAfter !== undefined ? new Date(b.createdAfter) : undefined,
    createdBefore: b.createdBefore !== undefined ? new Date(b.createdBefore) : undefined,
  };
}

export function registerReplayRoutes(app: App, deps: AppDeps): void {
  app.openapi(routes.attempts, async (c) => {
    const found = await listAttempts(c.env.db, c.var.tenant, c.req.valid('param').id);
    if (!found) throw notFound('task');
    const http = found.task === 'http';
    const attempts = found.attempts.map((a) => ({
      attempt: a.attempt,
      epoch: a.epoch,
      startedAt: a.startedAt?.toISOString() ?? null,
      finishedAt: a.finishedAt.toISOString(),
      durationMs: a.startedAt ? Math.max(0, a.finishedAt.getTime() - a.startedAt.getTime()) : null,
      outcome: a.outcome,
      error: a.error,
      ...(http ? { status: a.httpStatus } : {}),
    }));
    return c.json({ attempts }, 200);
  });

  app.openapi(routes.bulkCancel, async (c) => {
    const b = c.req.valid('json');
    const ids = await cancelMatching(c.env.db, c.var.tenant, matchOf(b), b.limit ?? DEFAULT_BULK_LIMIT, c.env.now);
    return c.json({ affected: ids.length, ids }, 200);
  });

  app.openapi(routes.bulkReplay, async (c) => {
    const b = c.req.valid('json');
    const { ids, replays } = await replayMatching(
      { db: c.env.db, config: deps.config },
      c.var.tenant,
      matchOf(b),
      b.limit ?? DEFAULT_BULK_LIMIT,
      c.env.now,
    );
    kickDueQueues(deps, c.env, replays.map((task) => ({ outcome: 'created' as const, task })), c.var.log);
    return c.json({ affected: ids.length, ids, replayIds: replays.map((r) => r.id) }, 200);
  });

  app.openapi(routes.replay, async (c) => {
    const body = (c.req.valid('json') ?? {}) as { runAt?: string; delay?: number };
    const result = await replayTask(
      { db: c.env.db, config: deps.config },
      c.var.tenant,
      c.req.valid('param').id,
      { runAt: body.runAt !== undefined ? new Date(body.runAt) : undefined, delay: body.delay },
      c.env.now,
    );
    if (result.outcome === 'created') {
      kickDueQueues(deps, c.env, [{ outcome: 'created', task: result.task }], c.var.log);
      return c.json(taskJson(result.task), 201);
    }
    return c.json(taskJson(result.task), 200);
  });
}
