// A schedule as the core sees it, its row, and the one place its columns are
// mapped, beside the statements that select them (like taskRows.ts).
import type { Delivery, TaskCallback } from './taskRows.ts';

export const RECURRENCE_UNITS = ['minutes', 'hours', 'days', 'weeks', 'months'] as const;
export type RecurrenceUnit = (typeof RECURRENCE_UNITS)[number];
export const SCHEDULE_KINDS = ['cron', 'interval', 'recurrence', 'once'] as const;
export type ScheduleKind = (typeof SCHEDULE_KINDS)[number];
export const MISFIRE_POLICIES = ['run_once', 'catch_up', 'skip'] as const;
export type MisfirePolicy = (typeof MISFIRE_POLICIES)[number];
export const OVERLAP_POLICIES = ['allow', 'skip'] as const;
export type OverlapPolicy = (typeof OVERLAP_POLICIES)[number];

/** What every occurrence task inherits, resolved against the defaults when the schedule was written. */
export interface OccurrenceOptions {
  backoffBaseMs: number;
  backoffMaxMs: number;
  timeoutMs: number;
  delivery: Delivery;
  /** Flow control of the occurrences (issue 16); absent on schedules written before it. */
  concurrency?: { key: string; limit: number } | null;
  rateLimit?: { key: string; limit: number; periodSeconds: number } | null;
  priority?: number;
  /** Completion callback of the occurrences (issue 15); absent on schedules written before it. */
  callback?: TaskCallback | null;
}

export interface Schedule {
  id: string;
  tenant: string;
  name: string;
  kind: ScheduleKind;
  cron: string | null;
  timezone: string;
  intervalSeconds: number | null;
  recurrenceEvery: number | null;
  recurrenceUnit: RecurrenceUnit | null;
  /** recurrence: the first occurrence; interval: the anchor of its rhythm. */
  anchor: Date | null;
  fireAt: Date | null;
  task: string;
  payload: unknown;
  queue: string;
  maxAttempts: number;
  options: OccurrenceOptions;
  misfire: MisfirePolicy;
  misfireGraceSeconds: number;
  catchUpLimit: number;
  overlap: OverlapPolicy;
  enabled: boolean;
  nextRunAt: Date | null;
  lastFiredAt: Date | null;
  createdAt: Date;
  updatedAt: Date;
}

export const SCHEDULE_COLUMNS = `id, tenant, name, kind, cron, timezone, interval_seconds, recurrence_every,
  recurrence_unit, recurrence_start, fire_at, task, payload, queue, max_attempts, options, misfire,
  misfire_grace_seconds, catch_up_limit, overlap, enabled, next_run_at, last_fired_at, created_at, updated_at`;

export interface ScheduleRow {
  id: string;
  tenant: string;
  name: string;
  kind: ScheduleKind;
  cron: string | null;
  timezone: string;
  interval_seconds: number | null;
  recurrence_every: number | null;
  recurrence_unit: RecurrenceUnit | null;
  recurrence_start: Date | null;
  fire_at: Date | null;
  task: string;
  payload: unknown;
  queue: string;
  max_attempts: number;
  options: OccurrenceOptions;
  misfire: MisfirePolicy;
  misfire_grace_seconds: number;
  catch_up_limit: number;
  overlap: OverlapPolicy;
  enabled: boolean;
  next_run_at: Date | null;
  last_fired_at: Date | null;
  created_at: Date;
  updated_at: Date;
}

export function scheduleFromRow(r: ScheduleRow): Schedule {
  return {
    id: String(r.id),
    tenant: r.tenant,
    name: r.name,
    kind: r.kind,
    cron: r.cron,
    timezone: r.timezone,
    intervalSeconds: r.interval_seconds,
    recurrenceEvery: r.recurrence_every,
    recurrenceUnit: r.recurrence_unit,
    anchor: r.recurrence_start,
    fireAt: r.fire_at,
    task: r.task,
    payload: r.payload,
    queue: r.queue,
    maxAttempts: r.max_attempts,
    options: r.options,
    misfire: r.misfire,
    misfireGraceSeconds: r.misfire_grace_seconds,
    catchUpLimit: r.catch_up_limit,
    overlap: r.overlap,
    enabled: r.enabled,
    nextRunAt: r.next_run_at,
    lastFiredAt: r.last_fired_at,
    createdAt: r.created_at,
    updatedAt: r.updated_at,
  };
}
