// /v1/schedules: recurring and future work, scoped to the caller's tenant.
import { createRoute, z } from '@hono/zod-openapi';
import { databaseNow, getSchedule, listScheduleRuns, listSchedules, setScheduleEnabled } from '../../db/sql/schedules.ts';
import { notFound } from '../../errors.ts';
import { nextFireTimes, specOf } from '../../schedules/recurrence.ts';
import { deleteSchedule, pauseSchedule, putSchedule } from '../../schedules/service.ts';
import type { App, AppDeps } from '../context.ts';
import {
  NextQuery,
  runPaging,
  ScheduleListQuery,
  ScheduleName,
  scheduleJson,
  schedulePaging,
  ScheduleRunsQuery,
  ScheduleSchema,
  ScheduleWriteSchema,
} from '../schemas/schedules.ts';
import { TaskPageSchema, taskJson } from '../schemas/tasks.ts';
import { commonErrors, json, jsonBody, notFoundError, quotaError } from './common.ts';

const NameParam = z.object({ name: ScheduleName });
const routes = {
  put: createRoute({
    method: 'put',
    path: '/v1/schedules/{name}',
    summary: 'Create or replace a schedule; occurrences planned under the old definition that have not started give way to the new one',
    request: { params: NameParam, ...jsonBody(ScheduleWriteSchema) },
    responses: {
      201: json(ScheduleSchema, 'Created'),
      200: json(ScheduleSchema, 'Replaced'),
      ...commonErrors,
      ...quotaError('maxSchedules or minScheduleIntervalSeconds'),
    },
  }),
  list: createRoute({
    method: 'get',
    path: '/v1/schedules',
    summary: 'List schedules by name',
    request: { query: ScheduleListQuery },
    responses: {
      200: json(z.object({ schedules: z.array(ScheduleSchema), nextCursor: z.string().nullable() }).openapi('SchedulePage'), 'A page'),
      ...commonErrors,
    },
  }),
  get: createRoute({
    method: 'get',
    path: '/v1/schedules/{name}',
    summary: 'Get a schedule',
    request: { params: NameParam },
    responses: { 200: json(ScheduleSchema, 'The schedule'), ...commonErrors, ...notFoundError('schedule') },
  }),
  delete: createRoute({
    method: 'delete',
    path: '/v1/schedules/{name}',
    summary: 'Delete a schedule; its occurrences that have not started are cancelled',
    request: { params: NameParam },
    responses: { 200: json(ScheduleSchema, 'Deleted'), ...commonErrors, ...notFoundError('schedule') },
  }),
  pause: createRoute({
    method: 'post',
    path: '/v1/schedules/{name}/pause',
    summary: 'Pause a schedule; its occurrences that have not started (even claimed early) are taken back: nothing fires after this answers',
    request: { params: NameParam },
    responses: { 200: json(ScheduleSchema, 'Paused'), ...commonErrors, ...notFoundError('schedule') },
  }),
  resume: createRoute({
    method: 'post',
    path: '/v1/schedules/{name}/resume',
    summary: 'Resume a schedule; fire times since the pause follow its misfire policy',
    request: { params: NameParam },
    responses: { 200: json(ScheduleSchema, 'Resumed'), ...commonErrors, ...notFoundError('schedule') },
  }),
  next: createRoute({
    method: 'get',
    path: '/v1/schedules/{name}/next',
    summary: 'Preview upcoming fire times',
    request: { params: NameParam, query: NextQuery },
    responses: {
      200: json(z.object({ times: z.array(z.string()) }).openapi('FireTimes'), 'Upcoming fire times'),
      ...commonErrors,
      ...notFoundError('schedule'),
    },
  }),
  runs: createRoute({
    method: 'get',
    path: '/v1/schedules/{name}/runs',
    summary: "A schedule's occurrences, newest fire time first",
    request: { params: NameParam, query: ScheduleRunsQuery },
    responses: { 200: json(TaskPageSchema, 'A page of occurrences'), ...commonErrors, ...notFoundError('schedule') },
  }),
};

export function registerScheduleRoutes(app: App, deps: AppDeps): void {
  app.openapi(routes.put, async (c) => {
    const b = c.req.valid('json');
    const { schedule, created } = await putSchedule(
      { db: c.env.db, config: deps.config, registry: deps.registry },
      c.var.tenant,
      c.req.valid('param').name,
      { ...b, at: b.at !== undefined ? new Date(b.at) : undefined, recurrence: b.recurrence && { ...b.recurrence, start: new Date(b.recurrence.start) } },
      c.env.now,
    );
    return c.json(scheduleJson(schedule), created ? 201 : 200);
  });

  app.openapi(routes.list, async (c) => {
    const { page, nextCursor } = await schedulePaging.read(
      c.req.valid('query'),
      (afterName, limit) => listSchedules(c.env.db, c.var.tenant, { afterName, limit }),
      (s) => s.name,
    );
    return c.json({ schedules: page.map(scheduleJson), nextCursor }, 200);
  });

  app.openapi(routes.get, async (c) => {
    const s = await getSchedule(c.env.db, c.var.tenant, c.req.valid('param').name);
    if (!s) throw notFound('schedule');
    return c.json(scheduleJson(s), 200);
  });

  app.openapi(routes.delete, async (c) => {
    const deleted = await deleteSchedule(c.env.db, c.var.tenant, c.req.valid('param').name, c.env.now);
    if (!deleted) throw notFound('schedule');
    return c.json(scheduleJson(deleted), 200);
  });

  app.openapi(routes.pause, async (c) => {
    const s = await pauseSchedule(c.env.db, c.var.tenant, c.req.valid('param').name, c.env.now);
    if (!s) throw notFound('schedule');
    return c.json(scheduleJson(s), 200);
  });

  app.openapi(routes.resume, async (c) => {
    const s = await setScheduleEnabled(c.env.db, { now: c.env.now, tenant: c.var.tenant, name: c.req.valid('param').name, enabled: true });
    if (!s) throw notFound('schedule');
    return c.json(scheduleJson(s), 200);
  });

  app.openapi(routes.next, async (c) => {
    const s = await getSchedule(c.env.db, c.var.tenant, c.req.valid('param').name);
    if (!s) throw notFound('schedule');
    const now = await databaseNow(c.env.db, c.env.now);
    const from = s.nextRunAt && s.nextRunAt > now ? new Date(s.nextRunAt.getTime() - 1) : new Date(now.getTime() - 1);
    const times = nextFireTimes(specOf(s), from, c.req.valid('query').count);
    return c.json({ times: times.map((t) => t.toISOString()) }, 200);
  });

  app.openapi(routes.runs, async (c) => {
    const s = await getSchedule(c.env.db, c.var.tenant, c.req.valid('param').name);
    if (!s) throw notFound('schedule');
    const q = c.req.valid('query');
    const { page, nextCursor } = await runPaging.read(
      q,
      (before, limit) =>
        listScheduleRuns(c.env.db, c.var.tenant, s.id, { before: before === undefined ? undefined : new Date(before), statuses: q.status?.split(','), limit }),
      (t) => t.scheduledFor!.toISOString(),
    );
    return c.json({ tasks: page.map(taskJson), nextCursor }, 200);
  });
}
