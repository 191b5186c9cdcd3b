// One Queue batch (DESIGN §6): fenced start for the whole batch, handlers run
// concurrently (each with its timeout), and each result is stored by a fenced
// finish as soon as its handler settles (results settling within a few
// milliseconds share one statement), each message acknowledged once its own
// result is stored. A message that no longer matches its
// task's epoch (cancelled, reaped and re-claimed, already started) is
// acknowledged and skipped: a stale worker never runs and never writes. A task
// whose queue was paused after its claim is refused at the start (back to
// `queued`, attempt refunded) and its message acknowledged. A message
// delivered before its task's run_at (the Queue's whole-second delay, rounded
// down) does not start it: the consumer waits out the rest and starts it then
// with the same fenced statement (one per group of tasks due together, the
// groups one after another in run_at order), so
// until its run_at a reschedule, a cancel or a pause still takes it back; a
// wait too long for the invocation is left to the Queue (retried with a delay).
// If the database cannot be reached, messages are retried by the Queue, not acked.
import { traceIdOf } from '../tracing/trace-context.ts';
import type { Config } from '../config.ts';
import type { Db } from '../db/seam.ts';
import { extendLeaseIfRunning, finishIfRunning, startIfClaimed, type AttemptResult, type EarlyTask, type StartedTask } from '../db/sql/tasks-fence.ts';
import { noFaults, type Faults } from '../faults.ts';
import { attemptError, ResultError, resultText } from '../tasks/attempts.ts';
import { LeaseLostError, PermanentError, RETRY_AFTER_MAX_MS, RetryAfterError } from '../handlers/errors.ts';
import type { Registry, TaskContext } from '../handlers/registry.ts';
import type { Logger } from '../log.ts';
import { zodDetails } from '../zod-details.ts';
import { MAX_EARLY_WAIT_SECONDS } from '../tasks/options.ts';
import type { SigningSecretsLoader, SigningSecretStore } from '../tenants/signing-secrets.ts';
import { parseTaskMessage, reportLostFences } from '../queue/messages.ts';

export type Verdict = 'ack' | 'retry';

export interface ConsumeDeps {
  db: Db;
  config: Config;
  registry: Registry;
  log: Logger;
  faults?: Faults;
  /** The tenants' webhook signing secrets; without it handlers sign nothing. */
  signingSecrets?: SigningSecretStore;
  /**
   * Waits out the rest before an early task's run_at; injectable for tests.
   * With a `now` override the start after it runs at `now` plus the wait.
   */
  sleep?: (ms: number) => Promise<void>;
}

export interface ConsumeOutcome {
  verdicts: Verdict[];
  /** Per started task: its final status after the finish (or `lost`). */
  results: { id: string; outcome: AttemptResult['outcome']; status: string }[];
  skipped: number;
  /** Messages delivered too early to wait for in this invocation: retried with a delay. */
  deferred: number;
}

/** Settles one message; a retry may name its delay (otherwise the caller's default). */
export type OnSettled = (index: number, verdict: Verdict, retryDelaySeconds?: number) => void;

/** lastError keeps a short excerpt, never a whole response body. */
const MAX_ERROR_LENGTH = 2000;
/** Early by more than the Queue's batch timeout plus this, a message is retried with a delay rather than waited for. */
const EARLY_WAIT_MARGIN_SECONDS = 3;
/** Early tasks due within this many milliseconds of the group's first share one start statement. */
export const EARLY_START_COALESCE_MS = 100;
/** Start rounds per message; a task still early after them (a sleep cut short) is retried with a delay. */
const MAX_START_ROUNDS = 3;

/** The longest wait for an early task's run_at inside the invocation (never above MAX_EARLY_WAIT_SECONDS). */
export function earlyWaitLimitMs(config: Config): number {
  return Math.min(MAX_EARLY_WAIT_SECONDS, config.queueBatchTimeoutSeconds + EARLY_WAIT_MARGIN_SECONDS) * 1000;
}

/** Early tasks sorted by wait, in groups spanning at most EARLY_START_COALESCE_MS. */
function groupByWait(early: readonly EarlyTask[]): EarlyTask[][] {
  const groups: EarlyTask[][] = [];
  for (const e of [...early].sort((a, b) => a.waitMs - b.waitMs)) {
    const last = groups.at(-1);
    if (last && e.waitMs - last[0]!.waitMs <= EARLY_START_COALESCE_MS) last.push(e);
    else groups.push([e]);
  }
  return groups;
}

const defaultSleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

function lastErrorText(error: unknown): string {
  const text = error instanceof Error ? `${error.name === 'Error' ? '' : `${error.name}: `}${error.message}` : String(error);
  return text.length > MAX_ERROR_LENGTH ? `${text.slice(0, MAX_ERROR_LENGTH - 1)}…` : text;
}

/**
 * A handler's own retry delay as the fenced finish stores it (an int of
 * milliseconds per task, one statement for the batch): whole, from 0 to
 * RETRY_AFTER_MAX_MS; not a number, the task's backoff. Unbounded, a delay of
 * 30 days or a fraction failed the statement and lost its neighbours' results.
 */
function retryDelayOf(ms: number): number | null {
  if (typeof ms !== 'number' || Number.isNaN(ms)) return null;
  return Math.min(RETRY_AFTER_MAX_MS, Math.max(0, Math.round(ms)));
}

/** The abort reason a handler's signal carries once its attempt is over (one object: its stack says nothing). */
const ATTEMPT_FINISHED = new Error('attempt finished');

async function runAttempt(
  deps: ConsumeDeps,
  started: StartedTask,
  now: Date | undefined,
  signingSecrets: SigningSecretsLoader,
): Promise<AttemptResult> {
  const { task } = started;
  const base = { id: task.id, epoch: task.epoch, retryDelayMs: null };
  const log = deps.log.child({
    taskId: task.id,
    tenant: task.tenant,
    task: task.task,
    attempt: task.attempts,
    ...(started.trace ? { traceId: traceIdOf(started.trace.traceparent) } : {}),
  });
  // A rate-limited start given a later place on its key's line (at most
  // RATE_LIMIT_START_WAIT_SECONDS) waits for it: the line holds the place.
  if (started.waitMs > 0) await (deps.sleep ?? defaultSleep)(started.waitMs);
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
    return { ...base, outcome: 'permanent', error: lastErrorText(message), errorName: 'InvalidPayload', errorMessage: message };
  }

  const controller = new AbortController();
  // Made when the timer fires: an Error captures a stack, and two of them
  // per attempt were most of the consumer's own CPU per task (BENCHMARKS.md,
  // issue 12, sixteenth pass).
  let timeoutError: Error | undefined;
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timedOut = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      timeoutError = new Error(`timed out after ${task.timeoutMs} ms`);
      timeoutError.name = 'TimeoutError';
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
    epoch: task.epoch,
    signal: controller.signal,
    log,
    signingSecrets: () => signingSecrets(task.tenant),
    trace: started.trace,
    async heartbeat(extendSeconds) {
      const seconds = extendSeconds ?? task.timeoutMs / 1000 + deps.config.leaseGraceSeconds;
      const until = await extendLeaseIfRunning(deps.db, { now, id: task.id, epoch: task.epoch, seconds });
      if (until === null) throw new LeaseLostError(task.id, task.epoch);
    },
  };
  // For the attempt history: the error's name and message, and an http response's status.
  const failure = (error: unknown) => {
    const e = attemptError(error);
    const status = (error as { httpStatus?: unknown } | null)?.httpStatus;
    return { error: lastErrorText(error), errorName: e.name, errorMessage: e.message, httpStatus: typeof status === 'number' ? status : null };
  };
  try {
    const value = await Promise.race([handler.run(parsed.data as never, ctx), timedOut]);
    const result = resultText(value);
    if (!result.ok) return { ...base, outcome: 'failed', ...failure(new ResultError(result.message)) };
    const status = (value as { status?: unknown } | null)?.status;
    const httpStatus = task.task === 'http' && typeof status === 'number' ? status : null;
    return { ...base, outcome: 'succeeded', error: null, result: result.text, httpStatus };
  } catch (error) {
    if (timeoutError !== undefined && error === timeoutError) {
      log.warn('task timed out; handler aborted', { timeoutMs: task.timeoutMs });
      return { ...base, outcome: 'failed', ...failure(error), timedOut: true };
    }
    if (error instanceof PermanentError) return { ...base, outcome: 'permanent', ...failure(error) };
    if (error instanceof RetryAfterError) return { ...base, outcome: 'failed', ...failure(error), retryDelayMs: retryDelayOf(error.delayMs) };
    return { ...base, outcome: 'failed', ...failure(error) };
  } finally {
    clearTimeout(timer);
    if (!controller.signal.aborted) controller.abort(ATTEMPT_FINISHED);
  }
}

export async function consumeBatch(
  deps: ConsumeDeps,
  bodies: readonly unknown[],
  options: { now?: Date; onSettled?: OnSettled } = {},
): Promise<ConsumeOutcome> {
  const { db, log, config } = deps;
  const faults = deps.faults ?? noFaults;
  const sleep = deps.sleep ?? defaultSleep;
  const verdicts: Verdict[] = bodies.map(() => 'ack');
  let retriedUnstarted = 0;
  let deferred = 0;
  const settle = (indexes: readonly number[], verdict: Verdict, retryDelaySeconds?: number) => {
    for (const i of indexes) {
      verdicts[i] = verdict;
      options.onSettled?.(i, verdict, retryDelaySeconds);
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
  const indexesOf = (t: { id: string; epoch: number }) => copies.get(`${t.id}:${t.epoch}`) ?? [];
  const unique = [...copies.values()].map((indexes) => messages[indexes[0]!]!);
  if (unique.length === 0) return { verdicts, results: [], skipped: bodies.length, deferred: 0 };
  const results: ConsumeOutcome['results'] = [];

  // One fenced start for the tasks given (the whole batch, then each group of
  // early tasks once due); runs what started, waits out the early ones.
  // `onStatement` is called once the start statement has returned.
  async function startAndRun(
    tasks: readonly { id: string; epoch: number; rated?: boolean }[],
    now: Date | undefined,
    round: number,
    onStatement: () => void = () => {},
  ): Promise<void> {
    let start: Awaited<ReturnType<typeof startIfClaimed>>;
    try {
      start = await startIfClaimed(db, { now, tasks, leaseGraceSeconds: config.leaseGraceSeconds });
    } catch (error) {
      onStatement();
      log.error('fenced start failed; batch left for redelivery', { error });
      const indexes = tasks.flatMap(indexesOf);
      retriedUnstarted += indexes.length;
      settle(indexes, 'retry');
      return;
    }
    onStatement();
    for (const l of start.lost) {
      if (l.reason === 'queue_paused') {
        log.info('start refused: the queue is paused; task back in its queue, attempt refunded', { taskId: l.id, epoch: l.epoch });
        continue;
      }
      if (l.reason === 'rate_limited') {
        log.info('start refused: over its key\'s rate limit; task back in its queue, attempt refunded', { taskId: l.id, epoch: l.epoch });
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
    // Stale and duplicate messages are done with: acknowledged at once.
    settle(start.lost.flatMap(indexesOf), 'ack');
    const waiting: EarlyTask[] = [];
    for (const e of start.early) {
      if (e.waitMs <= earlyWaitLimitMs(config) && round < MAX_START_ROUNDS) {
        waiting.push(e);
        continue;
      }
      // Too early to wait for here: the Queue brings it back (a little early again, then waited for).
      const delaySeconds = Math.max(0, Math.floor(e.waitMs / 1000) - config.queueBatchTimeoutSeconds);
      log.info('delivered early; retried with a delay', { taskId: e.id, epoch: e.epoch, waitMs: e.waitMs, delaySeconds });
      const indexes = indexesOf(e);
      retriedUnstarted += indexes.length;
      deferred += indexes.length;
      settle(indexes, 'retry', delaySeconds);
    }
    await Promise.all([runStarted(start.started, now), startInTurn(groupByWait(waiting), now, round + 1)]);
  }

  // The early groups start one after another in the order of their run_at,
  // each statement after the one before it has returned (their handlers run
  // on concurrently): a rate-limited key's start line then hands out places
  // in run_at order, as one statement over the whole batch would. Started in
  // parallel, a later group could reach the line first and push an earlier
  // one behind it.
  async function startInTurn(groups: readonly EarlyTask[][], now: Date | undefined, round: number): Promise<void> {
    const running: Promise<void>[] = [];
    let slept = 0;
    for (const group of groups) {
      const wait = Math.ceil(group.at(-1)!.waitMs);
      if (wait > slept) await sleep(wait - slept);
      slept = Math.max(slept, wait);
      let started!: () => void;
      const statementDone = new Promise<void>((resolve) => (started = resolve));
      const run = startAndRun(group, now && new Date(now.getTime() + wait), round, started);
      // A failure rejects through Promise.all below (not as unhandled while later groups wait) and never stalls them.
      run.catch(() => started());
      running.push(run);
      await statementDone;
    }
    await Promise.all(running);
  }

  // Each attempt stores its own result as soon as it settles (sharing a
  // statement only with those that settle within a few milliseconds of it)
  // and its messages are settled right after: a slow handler never holds a
  // neighbour's result past that neighbour's lease.
  async function runStarted(started: readonly StartedTask[], now: Date | undefined): Promise<void> {
    if (started.length === 0) return;
    await faults('consume.after_start', { ids: started.map((s) => s.task.id) });
    // One statement loads the secrets of every tenant started together, on the first handler's call.
    const secrets = deps.signingSecrets?.batchLoader(db, started.map((s) => s.task.tenant), now) ?? (async () => []);
    // Rate-limited starts of one batch are spread over their key's line: a
    // group waits that much longer, so quick handlers still share one finish.
    const spreadMs = Math.min(FINISH_SPREAD_MAX_MS, Math.max(...started.map((s) => s.waitMs)));
    const finisher = createFinisher(deps, now, faults, started.length, spreadMs);
    const ran = await Promise.all(
      started.map(async (s) => {
        const result = await runAttempt(deps, s, now, secrets);
        const status = await finisher.store(result);
        settle(indexesOf({ id: s.task.id, epoch: s.task.epoch }), status === null ? 'retry' : 'ack');
        return { id: result.id, outcome: result.outcome, status: status ?? 'lost' };
      }),
    );
    results.push(...ran);
  }

  await startAndRun(unique, options.now, 1);
  return { verdicts, results, skipped: bodies.length - results.length - retriedUnstarted, deferred };
}

/** Settlements arriving within this many milliseconds share one fenced finish. */
export const FINISH_COALESCE_MS = 5;
/** At most this much of a batch's spread of rate-limited starts is added to the finish's wait. */
export const FINISH_SPREAD_MAX_MS = 100;

interface Finisher {
  /** Stores one attempt's result; resolves to the task's status (`lost`: fenced out), or null if it could not be stored. */
  store(result: AttemptResult): Promise<string | null>;
}

/**
 * Groups results that settle close together into one fenced finish statement.
 * A group is written FINISH_COALESCE_MS (plus `spreadMs`, the spread of the
 * batch's starts) after its first result arrived, or at once when every
 * attempt of the batch has settled (a batch of quick handlers still takes one
 * statement); groups never wait for each other, so a slow handler or a slow
 * statement delays only its own group.
 */
function createFinisher(
  deps: ConsumeDeps,
  now: Date | undefined,
  faults: Faults,
  attempts: number,
  spreadMs: number,
): Finisher {
  const { db, log } = deps;
  type Waiter = { result: AttemptResult; resolve: (status: string | null) => void; reject: (error: unknown) => void };
  let pending: Waiter[] = [];
  let timer: ReturnType<typeof setTimeout> | undefined;
  let outstanding = attempts;

  async function write(group: Waiter[]): Promise<void> {
    const ids = group.map((w) => w.result.id);
    try {
      await faults('consume.after_handlers', { ids });
      let finished: Awaited<ReturnType<typeof finishIfRunning>>;
      try {
        finished = await finishIfRunning(db, { now, results: group.map((w) => w.result) });
      } catch (error) {
        // The results are not stored: redeliveries find the attempts started
        // and skip them; the reaper then counts them failed (at least once).
        log.error('fenced finish failed; results not stored', { error, ids });
        for (const w of group) w.resolve(null);
        return;
      }
      reportLostFences(log, 'finishIfRunning', finished.lost);
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
        else if (timer === undefined) timer = setTimeout(flush, FINISH_COALESCE_MS + spreadMs);
      });
    },
  };
}
