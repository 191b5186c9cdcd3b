// Schedules as the API sees them: create or replace, read, pause, resume,
// delete, preview. Occurrences come from the materializer.
import type { Config } from '../config.ts';
import type { Db } from '../db/seam.ts';
import {
  cancelPendingOccurrences,
  databaseNow,
  deleteScheduleRow,
  getScheduleForUpdate,
  pauseScheduleWithdrawOccurrences,
  upsertSchedule,
  withdrawPlannedOccurrences,
  type ScheduleWrite,
} from '../db/sql/schedules.ts';
import { AppError, invalid, type ErrorDetail } from '../errors.ts';
import type { Registry } from '../handlers/registry.ts';
import { callbackOf, callbackProblem, resolveTaskOptions, type TaskOptionsInput } from '../tasks/options.ts';
import { checkScheduleQuotas } from '../tenants/quotas.ts';
import type { MisfirePolicy, OverlapPolicy, RecurrenceUnit, Schedule } from '../db/sql/scheduleRows.ts';
import { canonicalZoneName, nextFireTime, specOf, validateSpec } from './recurrence.ts';

export interface ScheduleInput extends TaskOptionsInput {
  cron?: string;
  timezone?: string;
  interval?: number;
  recurrence?: { every: number; unit: RecurrenceUnit; start: Date };
  at?: Date;
  task: string;
  payload?: unknown;
  queue?: string;
  misfire?: MisfirePolicy;
  misfireGrace?: number;
  catchUpLimit?: number;
  overlap?: OverlapPolicy;
  enabled?: boolean;
}

export interface ScheduleDeps {
  db: Db;
  config: Config;
  registry: Registry;
}

/**
 * A new schedule's first fire time: a cron or recurrence time at or after
 * `now`; an interval one period after its anchor; a one-shot's own instant,
 * even if past (it then fires once, as a late fire).
 */
export function firstRunAt(s: Parameters<typeof specOf>[0], now: Date): Date | null {
  if (s.kind === 'once') return s.fireAt;
  return nextFireTime(specOf(s), s.kind === 'interval' ? now : new Date(now.getTime() - 1));
}

/** Whether two definitions fire at the same times (kind, expression, zone, rhythm and anchor). */
function sameTiming(a: Parameters<typeof specOf>[0], b: Parameters<typeof specOf>[0]): boolean {
  return JSON.stringify(specOf(a)) === JSON.stringify(specOf(b));
}

/**
 * Creates or replaces the schedule `name`. Idempotent: the same body twice
 * leaves the same schedule. A replacement changes future occurrences only;
 * an interval keeps its rhythm unless the interval itself changed, and a fire
 * time already due is kept unless the timing changed.
 */
export async function putSchedule(
  deps: ScheduleDeps,
  tenant: string,
  name: string,
  input: ScheduleInput,
  now?: Date,
): Promise<{ schedule: Schedule; created: boolean }> {
  const { config } = deps;
  const kind = input.cron !== undefined ? 'cron' : input.interval !== undefined ? 'interval' : input.recurrence ? 'recurrence' : 'once';
  const details: ErrorDetail[] = [];
  let payload: unknown;
  try {
    payload = deps.registry.validate(input.task, input.payload === undefined ? {} : input.payload, '');
  } catch (error) {
    if (!(error instanceof AppError) || !error.details) throw error;
    details.push(...error.details);
  }
  const { options, problems } = resolveTaskOptions(input, config);
  details.push(...problems);
  const badCallback = callbackProblem(input.callback, config);
  if (badCallback) details.push(badCallback);
  // Stored canonical (`eUrOpE/pArIs` as `Europe/Paris`); an unknown name is kept for validation to name.
  const timezone = input.timezone === undefined ? 'UTC' : (canonicalZoneName(input.timezone) ?? input.timezone);
  // The anchor is settled below (it may depend on the stored schedule); any valid instant checks the rest.
  const probe = {
    kind,
    cron: input.cron ?? null,
    timezone,
    intervalSeconds: input.interval ?? null,
    recurrenceEvery: input.recurrence?.every ?? null,
    recurrenceUnit: input.recurrence?.unit ?? null,
    anchor: input.recurrence?.start ?? new Date(0),
    fireAt: input.at ?? null,
  } as const;
  details.push(...validateSpec(specOf(probe)).filter((d) => d.path !== 'anchor'));
  if (details.length > 0) throw invalid(details.length === 1 ? `${details[0]!.path}: ${details[0]!.message}` : 'invalid schedule', details);

  return deps.db.transaction(async (tx) => {
    const clock = await databaseNow(tx, now);
    const existing = await getScheduleForUpdate(tx, tenant, name);
    const anchor =
      kind === 'interval'
        ? existing?.kind === 'interval' && existing.intervalSeconds === input.interval
          ? existing.anchor!
          : clock
        : probe.anchor;
    const spec = { ...probe, anchor: kind === 'cron' || kind === 'once' ? null : anchor };
    await checkScheduleQuotas(tx, { config, tenant, spec: specOf({ ...spec, anchor }), replacing: existing !== null, now: clock });
    const write: ScheduleWrite = {
      tenant,
      name,
      ...spec,
      task: input.task,
      payload,
      queue: input.queue ?? 'default',
      maxAttempts: options.maxAttempts,
      options: {
        backoffBaseMs: options.backoffBaseMs,
        backoffMaxMs: options.backoffMaxMs,
        timeoutMs: options.timeoutMs,
        delivery: options.delivery,
        concurrency: input.concurrency ?? null,
        rateLimit: input.rateLimit ?? null,
        priority: input.priority ?? 0,
        callback: callbackOf(input.callback),
      },
      misfire: input.misfire ?? 'run_once',
      misfireGraceSeconds: input.misfireGrace ?? 60,
      catchUpLimit: input.catchUpLimit ?? 100,
      overlap: input.overlap ?? 'allow',
      enabled: input.enabled ?? true,
      nextRunAt: firstRunAt({ ...spec, anchor }, clock),
    };
    // due_fire_kept: a replacement that keeps the timing keeps a fire time
    // already due and not yet materialized (the sweep is late), so a retried
    // PUT loses no fire; the materializer applies the misfire policy to it.
    if (existing?.enabled && write.enabled && existing.nextRunAt && existing.nextRunAt <= clock && sameTiming(existing, { ...spec, anchor })) {
      write.nextRunAt = existing.nextRunAt;
    }
    // Occurrences the look-ahead planned under the old definition give way to the new one.
    if (existing) await withdrawPlannedOccurrences(tx, { now, tenant, name });
    return upsertSchedule(tx, write, now);
  });
}

/**
 * Pauses a schedule: nothing fires after this answers (occurrences that have
 * not started, claimed early or not, are withdrawn or cancelled in the same
 * statement). The row lock is taken first, so an occurrence a concurrent
 * materialization is writing is either seen and taken back, or never written.
 */
export async function pauseSchedule(db: Db, tenant: string, name: string, now?: Date): Promise<Schedule | null> {
  return db.transaction(async (tx) => {
    if (!(await getScheduleForUpdate(tx, tenant, name))) return null;
    return (await pauseScheduleWithdrawOccurrences(tx, { now, tenant, name }))?.schedule ?? null;
  });
}

/** Deletes a schedule; its occurrences that have not started are cancelled, the rest kept as history. */
export async function deleteSchedule(db: Db, tenant: string, name: string, now?: Date): Promise<Schedule | null> {
  return db.transaction(async (tx) => {
    // Lock first: an occurrence a concurrent materialization commits is then seen and cancelled.
    if (!(await getScheduleForUpdate(tx, tenant, name))) return null;
    await cancelPendingOccurrences(tx, { now, tenant, name });
    return deleteScheduleRow(tx, { tenant, name });
  });
}
