// One Queue batch (DESIGN §6): fenced start for the whole batch, handlers run
// concurrently (each with its timeout), and each result is stored by a fenced
// finish as soon as its handler settles (results settling within a few
// milliseconds share one statement), each message acknowledged once its own
// result is stored. A message that no longer matches its
// task's epoch (cancelled, reaped and re-claimed, already started) is
// acknowledged and skipped: a stale worker never runs and never writes. A task
// whose queue was paused after its claim is refused at the start (back to
// `queued`, attempt refunded) and its message acknowledged. If the
// database cannot be reached, messages are retried by the Queue, not acked.
import { traceIdOf } from '../tracing/trace-context.ts';
import type { Config } from '../config.ts';
import type { Db } from '../db/seam.ts';
import { extendLease, finishTasks, startTasks, type AttemptResult, type StartedTask } from '../db/sql/tasks.ts';
import { noFaults, type Faults } from '../faults.ts';
import { attemptError, ResultError, resultText } from '../tasks/attempts.ts';
import {
  LeaseLostError,
  PermanentError,
  RetryAfterError,
  zodDetails,
  type Registry,
  type TaskContext,
} from '../handlers/registry.ts';
import type { Logger } from '../log.ts';
import { MAX_EARLY_WAIT_SECONDS } from '../tasks/options.ts';
import type { SigningSecretsLoader, SigningSecretStore } from '../tenants/signing-secrets.ts';
import { reportLostFences, type TaskMessage } from '../sweep/sweep.ts';

export type Verdict = 'ack' | 'retry';

export interface ConsumeDeps {
  db: Db;
  config: Config;
  registry: Registry;
  log: Logger;
  faults?: Faults;
  /** The tenants' webhook signing secrets; without it handlers sign nothing. */
  signingSecrets?: SigningSecretStore;
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
const MAX_EARLY_WAIT_MS = MAX_EARLY_WAIT_SECONDS * 1000;

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

async function runAttempt(
  deps: ConsumeDeps,
  started: StartedTask,
  now: Date | undefined,
  signingSecrets: SigningSecretsLoader,
): Promise<AttemptResult> {
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
    const message = `no handler is registered for task type "${task.task}"`;
    return { ...base, outcome: 'failed', error: message, errorName: 'NoHandler', errorMessage: message };
  }
  const parsed = handler.payload.safeParse(task.payload);
  if (!parsed.success) {
    const paths = zodDetails(parsed.error.issues, 'payload').map((d) => `${d.path}: ${d.message}`);
    const message = attemptError(new Error(`invalid payload: ${paths.join('; ')}`)).message;
    return { ...base, outcome: 'permanent', error: describe(message), errorName: 'InvalidPayload', errorMessage: message };
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
    webhookId: task.callbackOf === null ? task.id : `${task.callbackOf}.callback`,
    tenant: task.tenant,
    queue: task.queue,
    attempt: task.attempts,
    maxAttempts: task.maxAttempts,
    epoch: task.leaseEpoch,
    signal: controller.signal,
    log,
    signingSecrets: () => signingSecrets(task.tenant),
    trace: started.trace,
    async heartbeat(extendSeconds) {
      const seconds = extendSeconds ?? task.timeoutMs / 1000 + deps.config.leaseGraceSeconds;
      const until = await extendLease(deps.db, { now, id: task.id, epoch: task.leaseEpoch, seconds });
      if (until === null) throw new LeaseLostError(task.id, task.leaseEpoch);
    },
  };
  // For the attempt history: the error's name and message, and an http response's status.
  const failure = (error: unknown) => {
    const e = attemptError(error);
    const status = (error as { httpStatus?: unknown } | null)?.httpStatus;
    return { error: describe(error), errorName: e.name, errorMessage: e.message, httpStatus: typeof status === 'number' ? status : null };
  };
  try {
    const value = await Promise.race([handler.run(parsed.data as never, ctx), timedOut]);
    const result = resultText(value);
    if (!result.ok) return { ...base, outcome: 'failed', ...failure(new ResultError(result.message)) };
    const status = (value as { status?: unknown } | null)?.status;
    const httpStatus = task.task === 'http' && typeof status === 'number' ? status : null;
    return { ...base, outcome: 'succeeded', error: null, result: result.text, httpStatus };
  } catch (error) {
    if (error === timeoutError) {
      log.warn('task timed out; handler aborted', { timeoutMs: task.timeoutMs });
      return { ...base, outcome: 'failed', ...failure(error), timedOut: true };
    }
    if (error instanceof PermanentError) return { ...base, outcome: 'permanent', ...failure(error) };
    if (error instanceof RetryAfterError) return { ...base, outcome: 'failed', ...failure(error), retryDelayMs: error.delayMs };
    return { ...base, outcome: 'failed', ...failure(error) };
  } finally {
    clearTimeout(timer);
    if (!controller.signal.aborted) controller.abort(new Error('attempt finished'));
  }
}

export async function consumeBatch(
  deps: ConsumeDeps,
  bodies: readonly unknown[],
  options: { now?: Date; onSettled?: (index: number, verdict: Verdict) => void } = {},
): Promise<ConsumeOutcome> {
  const { db, log } = deps;
  const faults = deps.faults ?? noFaults;
  const now = options.now;
  const verdicts: Verdict[] = bodies.map(() => 'ack');
  const settle = (indexes: readonly number[], verdict: Verdict) => {
    for (const i of indexes) {
      verdicts[i] = verdict;
      options.onSettled?.(i, verdict);
    }
  };
  const messages = bodies.map(parseTaskMessage);
  messages.forEach((m, i) => {
    if (!m) {
      log.error('malformed task message acknowledged and dropped', { index: i, body: bodies[i] });
      settle([i], 'ack');
    }
  });
  // A batch may carry the same message twice: one start per (id, epoch), and
  // every copy settles with it.
  const copies = new Map<string, number[]>();
  messages.forEach((m, i) => {
    if (m) copies.set(`${m.id}:${m.epoch}`, [...(copies.get(`${m.id}:${m.epoch}`) ?? []), i]);
  });
  const unique = [...copies.values()].map((indexes) => messages[indexes[0]!]!);
  if (unique.length === 0) return { verdicts, results: [], skipped: bodies.length };

  let started: StartedTask[];
  try {
    const start = await startTasks(db, { now, tasks: unique, leaseGraceSeconds: deps.config.leaseGraceSeconds });
    started = start.started;
    for (const l of start.lost) {
      if (l.reason === 'queue_paused') {
        log.info('start refused: the queue is paused; task back in its queue, attempt refunded', { taskId: l.id, epoch: l.epoch });
        continue;
      }
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
    settle([...copies.values()].flat(), 'retry');
    return { verdicts, results: [], skipped: 0 };
  }
  const startedKeys = new Set(started.map((s) => `${s.task.id}:${s.task.leaseEpoch}`));
  // Stale and duplicate messages are done with: acknowledged at once.
  settle([...copies].filter(([key]) => !startedKeys.has(key)).flatMap(([, indexes]) => indexes), 'ack');
  await faults('consume.after_start', { ids: started.map((s) => s.task.id) });

  // Each attempt stores its own result as soon as it settles (sharing a
  // statement only with those that settle within a few milliseconds of it)
  // and its messages are settled right after: a slow handler never holds a
  // neighbour's result past that neighbour's lease.
  // One statement loads the secrets of every tenant in the batch, on the first handler's call.
  const secrets = deps.signingSecrets?.batchLoader(db, started.map((s) => s.task.tenant), now) ?? (async () => []);
  const finisher = createFinisher(deps, now, faults, started.length);
  const results = await Promise.all(
    started.map(async (s) => {
      const result = await runAttempt(deps, s, now, secrets);
      const status = await finisher.store(result);
      settle(copies.get(`${s.task.id}:${s.task.leaseEpoch}`) ?? [], status === null ? 'retry' : 'ack');
      return { id: result.id, outcome: result.outcome, status: status ?? 'lost' };
    }),
  );
  return { verdicts, results, skipped: bodies.length - started.length };
}

/** Settlements arriving within this many milliseconds share one fenced finish. */
export const FINISH_COALESCE_MS = 5;

interface Finisher {
  /** Stores one attempt's result; resolves to the task's status (`lost`: fenced out), or null if it could not be stored. */
  store(result: AttemptResult): Promise<string | null>;
}

/**
 * Groups results that settle close together into one fenced finish statement.
 * A group is written FINISH_COALESCE_MS after its first result arrived, or at
 * once when every attempt of the batch has settled (a batch of quick handlers
 * still takes one statement); groups never wait for each other, so a slow
 * handler or a slow statement delays only its own group.
 */
function createFinisher(deps: ConsumeDeps, now: Date | undefined, faults: Faults, attempts: number): Finisher {
  const { db, log } = deps;
  type Waiter = { result: AttemptResult; resolve: (status: string | null) => void; reject: (error: unknown) => void };
  let pending: Waiter[] = [];
  let timer: ReturnType<typeof setTimeout> | undefined;
  let outstanding = attempts;

  async function write(group: Waiter[]): Promise<void> {
    const ids = group.map((w) => w.result.id);
    try {
      await faults('consume.after_handlers', { ids });
      let finished: Awaited<ReturnType<typeof finishTasks>>;
      try {
        finished = await finishTasks(db, { now, results: group.map((w) => w.result) });
      } catch (error) {
        // The results are not stored: redeliveries find the attempts started
        // and skip them; the reaper then counts them failed (at least once).
        log.error('fenced finish failed; results not stored', { error, ids });
        for (const w of group) w.resolve(null);
        return;
      }
      reportLostFences(log, 'finish', finished.lost);
      await faults('consume.after_finish', { ids });
      const statusOf = new Map(finished.finished.map((f) => [f.id, f.status as string]));
      for (const w of group) w.resolve(statusOf.get(w.result.id) ?? 'lost');
    } catch (error) {
      for (const w of group) w.reject(error);
    }
  }

  function flush(): void {
    if (timer !== undefined) clearTimeout(timer);
    timer = undefined;
    const group = pending;
    pending = [];
    if (group.length > 0) void write(group);
  }

  return {
    store(result) {
      return new Promise((resolve, reject) => {
        pending.push({ result, resolve, reject });
        outstanding -= 1;
        if (outstanding === 0) flush();
        else if (timer === undefined) timer = setTimeout(flush, FINISH_COALESCE_MS);
      });
    },
  };
}
