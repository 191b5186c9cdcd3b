// Enqueue: one statement for a whole batch, whatever its size.
import type { Config } from '../config.ts';
import { isLostRace } from '../db/errors.ts';
import type { Db } from '../db/seam.ts';
import { findSpentKeys, insertTasks, type NewTask, type SpentKey } from '../db/sql/tasks-enqueue.ts';
import { AppError, invalid, type ErrorDetail } from '../errors.ts';
import type { Registry } from '../handlers/registry.ts';
import type { TraceContext } from '../tracing/trace-context.ts';
import type { Task } from '../db/sql/taskRows.ts';
import { utf8Length } from './attempts.ts';
import { callbackOf, callbackProblem, resolveTaskOptions, type TaskOptions, type TaskOptionsInput } from './options.ts';

/** A task as a caller asks for it (already shape-checked by the API schema). */
export interface TaskInput extends TaskOptionsInput {
  task: string;
  payload?: unknown;
  queue?: string;
  /** Absolute earliest start. */
  runAt?: Date;
  /** Seconds from now (the database's clock); exclusive with runAt. */
  delay?: number;
  idempotencyKey?: string;
}

export type EnqueueResult =
  | { outcome: 'created' | 'rescheduled' | 'deduplicated'; task: Task }
  /** The key's task was spent and retention has deleted it since. */
  | { outcome: 'deduplicated'; task: null; spent: SpentKey };

export interface EnqueueDeps {
  db: Db;
  config: Config;
  registry: Registry;
}

const MAX_RUNS = 3;

function toNewTask(input: TaskInput, options: TaskOptions, payload: unknown): NewTask {
  return {
    queue: input.queue ?? 'default',
    task: input.task,
    payload,
    runAt: input.runAt ?? null,
    delayMs: input.runAt ? null : Math.round((input.delay ?? 0) * 1000),
    maxAttempts: options.maxAttempts,
    backoffBaseMs: options.backoffBaseMs,
    backoffMaxMs: options.backoffMaxMs,
    timeoutMs: options.timeoutMs,
    delivery: options.delivery,
    idempotencyKey: input.idempotencyKey ?? null,
    concurrencyKey: input.concurrency?.key ?? null,
    concurrencyLimit: input.concurrency?.limit ?? null,
    rateKey: input.rateLimit?.key ?? null,
    rateLimit: input.rateLimit?.limit ?? null,
    ratePeriodSeconds: input.rateLimit?.periodSeconds ?? null,
    priority: input.priority ?? 0,
    callback: callbackOf(input.callback),
  };
}

/**
 * Validates every payload against its task type (all items, so one answer
 * names every bad field), then writes the batch in one statement.
 * `pathOf(i)` names item i in error paths (e.g. `tasks.3`), or '' for one task.
 */
export async function enqueueTasks(
  deps: EnqueueDeps,
  tenant: string,
  inputs: readonly TaskInput[],
  options: { now?: Date; pathOf?: (index: number) => string; trace?: TraceContext | null } = {},
): Promise<EnqueueResult[]> {
  const pathOf = options.pathOf ?? ((i: number) => (inputs.length === 1 ? '' : `tasks.${i}`));
  const details: ErrorDetail[] = [];
  const tooLarge: ErrorDetail[] = [];
  const rows: NewTask[] = [];
  const keyOwner = new Map<string, number>();
  inputs.forEach((input, i) => {
    const at = (field: string) => [pathOf(i), field].filter(Boolean).join('.');
    const size = utf8Length(JSON.stringify(input.payload === undefined ? {} : input.payload));
    if (size > deps.config.maxPayloadBytes) {
      tooLarge.push({ path: at('payload'), message: `${size} bytes; at most ${deps.config.maxPayloadBytes}` });
      return;
    }
    try {
      const payload = deps.registry.validate(input.task, input.payload === undefined ? {} : input.payload, pathOf(i));
      const { options, problems } = resolveTaskOptions(input, deps.config, pathOf(i));
      details.push(...problems);
      const badCallback = callbackProblem(input.callback, deps.config, pathOf(i));
      if (badCallback) details.push(badCallback);
      rows.push(toNewTask(input, options, payload));
    } catch (error) {
      if (!(error instanceof AppError) || !error.details) throw error;
      details.push(...error.details);
    }
    if (input.idempotencyKey !== undefined) {
      const first = keyOwner.get(input.idempotencyKey);
      if (first !== undefined) details.push({ path: at('idempotencyKey'), message: `repeats the key of ${pathOf(first)}` });
      else keyOwner.set(input.idempotencyKey, i);
    }
  });
  if (tooLarge.length > 0) throw new AppError('payload_too_large', 'payload too large', tooLarge);
  if (details.length > 0) throw invalid(details.length === 1 ? details[0]!.message : 'invalid tasks', details);

  for (let run = 1; ; run++) {
    try {
      return await writeBatch(deps, tenant, rows, options.now, options.trace ?? null);
    } catch (error) {
      if (error instanceof AppError && error.code === 'conflict' && error.subject !== undefined) {
        // A key held by another task type or queue: name the item that reused it.
        const i = keyOwner.get(error.subject);
        if (i !== undefined) {
          const path = [pathOf(i), 'idempotencyKey'].filter(Boolean).join('.');
          throw new AppError('conflict', error.message, [{ path, message: error.message }]);
        }
      }
      if (run >= MAX_RUNS || !isLostRace(error)) throw error;
    }
  }
}

async function writeBatch(
  deps: EnqueueDeps,
  tenant: string,
  rows: NewTask[],
  now: Date | undefined,
  trace: TraceContext | null,
): Promise<EnqueueResult[]> {
  const written = await insertTasks(deps.db, {
    now,
    tenant,
    lookaheadSeconds: deps.config.lookaheadSeconds,
    tasks: rows,
    maxPendingTasks: deps.config.quotaMaxPendingTasks,
    trace,
  });
  const missingKeys = rows.flatMap((r, i) => (written[i] === null ? [r.idempotencyKey!] : []));
  const spent = new Map(
    missingKeys.length > 0 ? (await findSpentKeys(deps.db, tenant, missingKeys)).map((s) => [s.idempotencyKey, s]) : [],
  );
  return rows.map((row, i): EnqueueResult => {
    const w = written[i];
    if (w) return { outcome: w.created ? 'created' : w.rescheduled ? 'rescheduled' : 'deduplicated', task: w.task };
    const record = spent.get(row.idempotencyKey!);
    if (!record) throw new Error(`enqueue: no row came back for idempotency key ${row.idempotencyKey}`);
    return { outcome: 'deduplicated', task: null, spent: record };
  });
}
