// One Queue batch (DESIGN §6): fenced start for the whole batch, handlers run
// concurrently (each with its timeout), fenced finish for the whole batch,
// and only then an acknowledgement. A message that no longer matches its
// task's epoch (cancelled, reaped and re-claimed, already started) is
// acknowledged and skipped: a stale worker never runs and never writes. If the
// database cannot be reached, messages are retried by the Queue, not acked.
import { traceIdOf } from '../tracing/trace-context.ts';
import type { Config } from '../config.ts';
import type { Db } from '../db/seam.ts';
import { extendLease, finishTasks, startTasks, type AttemptResult, type StartedTask } from '../db/sql/tasks.ts';
import { noFaults, type Faults } from '../faults.ts';
import {
  LeaseLostError,
  PermanentError,
  RetryAfterError,
  zodDetails,
  type Registry,
  type TaskContext,
} from '../handlers/registry.ts';
import type { Logger } from '../log.ts';
import { reportLostFences, type TaskMessage } from '../sweep/sweep.ts';

export type Verdict = 'ack' | 'retry';

export interface ConsumeDeps {
  db: Db;
  config: Config;
  registry: Registry;
  log: Logger;
  faults?: Faults;
  /** Waits out the sub-second rest before a task's run_at; injectable for tests. */
  sleep?: (ms: number) => Promise<void>;
}

export interface ConsumeOutcome {
  verdicts: Verdict[];
  /** Per started task: its final status after the finish (or `lost`). */
  results: { id: string; outcome: AttemptResult['outcome']; status: string }[];
  skipped: number;
}

/** lastError keeps a short excerpt, never a whole response body. */
const MAX_ERROR_LENGTH = 2000;
/** A message delivered early never waits longer than this for its run_at. */
const MAX_EARLY_WAIT_MS = 60_000;

const defaultSleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

export function parseTaskMessage(body: unknown): TaskMessage | null {
  const b = body as Partial<TaskMessage> | null;
  if (!b || typeof b !== 'object') return null;
  if (typeof b.id !== 'string' || !/^\d{1,19}$/.test(b.id)) return null;
  if (typeof b.epoch !== 'number' || !Number.isSafeInteger(b.epoch) || b.epoch < 1) return null;
  return { id: b.id, epoch: b.epoch, runAt: typeof b.runAt === 'number' ? b.runAt : 0 };
}

function describe(error: unknown): string {
  const text = error instanceof Error ? `${error.name === 'Error' ? '' : `${error.name}: `}${error.message}` : String(error);
  return text.length > MAX_ERROR_LENGTH ? `${text.slice(0, MAX_ERROR_LENGTH - 1)}…` : text;
}

async function runAttempt(deps: ConsumeDeps, started: StartedTask, now: Date | undefined): Promise<AttemptResult> {
  const { task } = started;
  const base = { id: task.id, epoch: task.leaseEpoch, retryDelayMs: null };
  const log = deps.log.child({
    taskId: task.id,
    tenant: task.tenant,
    task: task.task,
    attempt: task.attempts,
    ...(started.trace ? { traceId: traceIdOf(started.trace.traceparent) } : {}),
  });
  const handler = deps.registry.get(task.task);
  if (!handler) {
    // A rollout may be under way: retry rather than kill, attempts bound it.
    return { ...base, outcome: 'failed', error: `no handler is registered for task type "${task.task}"` };
  }
  const parsed = handler.payload.safeParse(task.payload);
  if (!parsed.success) {
    const paths = zodDetails(parsed.error.issues, 'payload').map((d) => `${d.path}: ${d.message}`);
    return { ...base, outcome: 'permanent', error: `invalid payload: ${paths.join('; ')}` };
  }

  const wait = Math.min(started.waitMs, MAX_EARLY_WAIT_MS);
  if (wait > 0) await (deps.sleep ?? defaultSleep)(wait);

  const controller = new AbortController();
  const timeoutError = new Error(`timed out after ${task.timeoutMs} ms`);
  timeoutError.name = 'TimeoutError';
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timedOut = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      controller.abort(timeoutError);
      reject(timeoutError);
    }, task.timeoutMs);
  });
  const ctx: TaskContext = {
    taskId: task.id,
    tenant: task.tenant,
    queue: task.queue,
    attempt: task.attempts,
    maxAttempts: task.maxAttempts,
    epoch: task.leaseEpoch,
    signal: controller.signal,
    log,
    trace: started.trace,
    async heartbeat(extendSeconds) {
      const seconds = extendSeconds ?? task.timeoutMs / 1000 + deps.config.leaseGraceSeconds;
      const until = await extendLease(deps.db, { now, id: task.id, epoch: task.leaseEpoch, seconds });
      if (until === null) throw new LeaseLostError(task.id, task.leaseEpoch);
    },
  };
  try {
    await Promise.race([handler.run(parsed.data as never, ctx), timedOut]);
    return { ...base, outcome: 'succeeded', error: null };
  } catch (error) {
    if (error === timeoutError) log.warn('task timed out; handler aborted', { timeoutMs: task.timeoutMs });
    if (error instanceof PermanentError) return { ...base, outcome: 'permanent', error: describe(error) };
    if (error instanceof RetryAfterError) return { ...base, outcome: 'failed', error: describe(error), retryDelayMs: error.delayMs };
    return { ...base, outcome: 'failed', error: describe(error) };
  } finally {
    clearTimeout(timer);
    if (!controller.signal.aborted) controller.abort(new Error('attempt finished'));
  }
}

export async function consumeBatch(
  deps: ConsumeDeps,
  bodies: readonly unknown[],
  options: { now?: Date } = {},
): Promise<ConsumeOutcome> {
  const { db, log } = deps;
  const faults = deps.faults ?? noFaults;
  const now = options.now;
  const verdicts: Verdict[] = bodies.map(() => 'ack');
  const messages = bodies.map(parseTaskMessage);
  messages.forEach((m, i) => {
    if (!m) log.error('malformed task message acknowledged and dropped', { index: i, body: bodies[i] });
  });
  const valid = messages.filter((m): m is TaskMessage => m !== null);
  // A batch may carry the same message twice: one start per (id, epoch).
  const unique = [...new Map(valid.map((m) => [`${m.id}:${m.epoch}`, m])).values()];
  if (unique.length === 0) return { verdicts, results: [], skipped: bodies.length };

  let started: StartedTask[];
  try {
    const start = await startTasks(db, { now, tasks: unique, leaseGraceSeconds: deps.config.leaseGraceSeconds });
    started = start.started;
    for (const l of start.lost) {
      const duplicate = l.currentEpoch === l.epoch && l.currentStatus === 'running';
      log.info(duplicate ? 'duplicate delivery skipped (attempt already started)' : 'stale message skipped', {
        taskId: l.id,
        epoch: l.epoch,
        currentEpoch: l.currentEpoch,
        currentStatus: l.currentStatus,
      });
    }
  } catch (error) {
    log.error('fenced start failed; batch left for redelivery', { error });
    return { verdicts: bodies.map(() => 'retry'), results: [], skipped: 0 };
  }
  await faults('consume.after_start', { ids: started.map((s) => s.task.id) });

  const results = await Promise.all(started.map((s) => runAttempt(deps, s, now)));
  await faults('consume.after_handlers', { ids: started.map((s) => s.task.id) });

  const startedIds = new Set(started.map((s) => s.task.id));
  let finished;
  try {
    finished = results.length > 0 ? await finishTasks(db, { now, results }) : { finished: [], lost: [] };
  } catch (error) {
    // The results are not stored: redeliveries find the attempt started and
    // skip it; the reaper then counts it as a failed attempt (at least once).
    log.error('fenced finish failed; results not stored', { error, ids: [...startedIds] });
    messages.forEach((m, i) => {
      if (m && startedIds.has(m.id)) verdicts[i] = 'retry';
    });
    return { verdicts, results: [], skipped: bodies.length - started.length };
  }
  reportLostFences(log, 'finish', finished.lost);
  await faults('consume.after_finish', { ids: [...startedIds] });

  const statusOf = new Map(finished.finished.map((f) => [f.id, f.status as string]));
  return {
    verdicts,
    results: results.map((r) => ({ id: r.id, outcome: r.outcome, status: statusOf.get(r.id) ?? 'lost' })),
    skipped: bodies.length - started.length,
  };
}
