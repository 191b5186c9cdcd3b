// One sweep (DESIGN §5): reap, materialize, promote, claim and dispatch, purge,
// after one probe statement that says whether any of them has work (an idle
// tick costs that statement alone).
// Every step is a bounded batch in a single statement, each step has a share
// of the time budget (so one step's backlog cannot stop the others), and the
// sweep stops starting new batches when its budget is spent, so a cut-off
// invocation leaves only work the next sweep finishes. Any number of sweeps
// may run at once.
import { traceIdOf } from '../tracing/trace-context.ts';
import type { Config } from '../config.ts';
import type { Db } from '../db/seam.ts';
import { claimTasks, wakeParkedTasks, listClaimableQueues, markDispatched, releaseIfUndispatched, type ClaimedTask } from '../db/sql/tasks-dispatch.ts';
import { promoteDueTasks, purgeFinishedTasks, purgeSpentKeys, reapExpiredLeases, type ReapCounts } from '../db/sql/tasks-maintenance.ts';
import { acquireDispatcherSlot, probeDueWork, releaseDispatcherSlot } from '../db/sql/dispatchers.ts';
import { purgeIdleFlowControl } from '../db/sql/concurrency.ts';
import { noFaults, type Faults } from '../faults.ts';
import type { Logger } from '../log.ts';
import { QUEUE_SEND_LIMIT, reportLostFences, sendInBatches, type PumpSender, type TaskSender } from '../queue/messages.ts';
import { materializeDueSchedules } from '../schedules/materialize.ts';

export interface SweepDeps {
  db: Db;
  config: Config;
  sender: TaskSender;
  /**
   * Continuous, parallel dispatch (issue 13): with a pump sender and
   * MAX_DISPATCHERS > 0, dispatch holds a dispatcher slot and fans out to
   * pumps while a backlog lasts. Without one, today's design: the sweep
   * alone dispatches, serially, within its budget.
   */
  pumps?: PumpSender;
  log: Logger;
  /** Written to claimed_by: which invocation holds the lease. */
  workerId: string;
  faults?: Faults;
  /** Milliseconds, for the time budget only (never for task times). */
  elapsed?: () => number;
  /** Picks the queue a dispatch pass starts at (in [0, 1)); tests fix it. */
  random?: () => number;
}

export interface DispatchCounts {
  claimed: number;
  dispatched: number;
  /** Claims given back because the send failed. */
  released: number;
  /** Claimed tasks no longer held under their claim when the dispatch mark was written (reported, nothing applied). */
  lost: number;
}

export interface SweepCounts extends DispatchCounts {
  reaped: ReapCounts;
  /** Schedules materialized, occurrences fired and recorded missed. */
  materialized: { schedules: number; fired: number; missed: number };
  promoted: number;
  purged: number;
  spentKeysPurged: number;
  /** Idle flow-control keys forgotten: slot rows and rate rows (issue 16). */
  flowKeysPurged: { slots: number; rates: number };
  /** Pump messages sent: dispatchers asked for (fan-out and re-arm). */
  pumps: number;
  /** The probe found nothing due: no other step ran (one statement). */
  idle: boolean;
  /** The budget ran out before every step finished its backlog. */
  budgetExhausted: boolean;
}

/**
 * A fresh id per invocation (`cron:`, `pump:`, `kick:` and 12 hex digits),
 * written to claimed_by of every task it claims and named in its log lines.
 * Short on purpose: every version of a claimed task's row carries it (the
 * claim's, the fenced start's and the finish's), and a UUID's 41 characters
 * were 72 bytes of WAL per task (BENCHMARKS.md, issue 12, sixteenth pass).
 * 48 random bits tell apart the invocations a log search meets.
 */
export function invocationId(kind: string): string {
  const bytes = crypto.getRandomValues(new Uint8Array(6));
  return `${kind}:${Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('')}`;
}

/**
 * Dispatch marks are kept this long past every lease they could hold, so a
 * reaper that fell behind (a sweep outage) still tells "sent" from "never sent".
 */
const MARK_REAPER_MARGIN_SECONDS = 3600;

/**
 * The queues whose last claim in this isolate met flow control (a
 * concurrency key or a rate limit): claimTasks takes the whole statement for
 * them at once, and the plain one for the rest. A hint, never a guard (the
 * plain claim leaves a batch with flow control unwritten); forgotten whole
 * past FLOW_HINTS_KEPT names, as queue names are the tenants' to choose.
 */
const flowQueues = new Set<string>();
const FLOW_HINTS_KEPT = 10_000;

/** Claims one batch of a queue for `workerId` (the sweep's dispatch, the kick's rounds, the pumps). */
export async function claimBatch(
  deps: { db: Db; config: Config },
  queue: string,
  workerId: string,
  now?: Date,
): Promise<{ claimed: ClaimedTask[]; held: number }> {
  const { claimed, held, flow } = await claimTasks(deps.db, {
    now,
    queue,
    limit: deps.config.sweepBatchSize,
    claimedBy: workerId,
    leaseSeconds: deps.config.claimLeaseSeconds,
    lookaheadSeconds: deps.config.lookaheadSeconds,
    flow: flowQueues.has(queue),
  });
  if (!flow) flowQueues.delete(queue);
  else {
    if (flowQueues.size >= FLOW_HINTS_KEPT) flowQueues.clear();
    flowQueues.add(queue);
  }
  return { claimed, held };
}

/** Claims one batch of a queue, sends it (in chunks the Queue accepts), marks it dispatched. */
async function dispatchBatch(deps: SweepDeps, queue: string, now?: Date): Promise<DispatchCounts & { held: number }> {
  const { claimed, held } = await claimBatch(deps, queue, deps.workerId, now);
  return { ...(await sendClaimed(deps, queue, claimed, now)), held };
}

/** Sends claimed tasks to the Queue and marks them dispatched; on a failed send, gives the claims back. */
export async function sendClaimed(deps: SweepDeps, queue: string, claimed: ClaimedTask[], now?: Date): Promise<DispatchCounts> {
  const { db, config, log } = deps;
  const faults = deps.faults ?? noFaults;
  const counts: DispatchCounts = { claimed: claimed.length, dispatched: 0, released: 0, lost: 0 };
  if (claimed.length === 0) return counts;
  await faults('sweep.after_claim', { queue, ids: claimed.map((c) => c.id) });

  const messages = claimed.map((c) => {
    // Whole seconds, rounded down and shortened by the Queue's batch timeout:
    // the message arrives a little early and the consumer waits out the rest,
    // so the task starts on its millisecond.
    const delaySeconds = Math.floor(c.delayMs / 1000) - config.queueBatchTimeoutSeconds;
    const body = { id: c.id, epoch: c.epoch, runAt: c.runAt.getTime(), ...(c.rated ? { rated: true } : {}) };
    return { body, ...(delaySeconds > 0 ? { delaySeconds } : {}) };
  });
  try {
    // A claim of SWEEP_BATCH_SIZE (500) goes out in sendBatch calls at once:
    // one send's latency per claim, not five.
    await sendInBatches(deps.sender, messages);
  } catch (error) {
    // All claims go back, including those whose chunk went out: their
    // messages find the task queued (or re-claimed under a new epoch) and skip it.
    counts.released = await releaseIfUndispatched(db, { now, tasks: claimed });
    log.error('send to queue failed; claims released', { queue, claimed: claimed.length, released: counts.released, error });
    throw error;
  }
  await faults('sweep.after_send', { queue, ids: claimed.map((c) => c.id) });

  // One row per claimed batch, named by the token its tasks carry (one token per claim statement).
  const lost = await markDispatched(db, { now, claimTokens: [...new Set(claimed.map((c) => c.claimToken))], tasks: claimed });
  reportLostFences(log, 'markDispatched', lost);
  // Traced tasks (W3C trace context from their enqueue) get a line each, carrying the trace id.
  const lostIds = new Set(lost.map((l) => l.id));
  for (const c of claimed) {
    if (c.traceparent && !lostIds.has(c.id)) log.info('task dispatched', { queue, taskId: c.id, traceId: traceIdOf(c.traceparent), delayMs: c.delayMs });
  }
  counts.lost = lost.length;
  counts.dispatched = claimed.length - lost.length;
  return counts;
}

/**
 * Whether a claim that picked `picked` tasks (claimed or held back) found a
 * backlog, so its queue is claimed again at once (the dispatch pass, the
 * kick's rounds, the pumps): a batch of SWEEP_BATCH_SIZE, or at least one
 * sendBatch's worth (100). Not the whole 500: under a steady 2,000 enqueues/s
 * a dispatcher's claim finds ~160; read as "no backlog", the pumps left and
 * the kick's interval set the pace (production model, due-to-start p50 /
 * p99: 833 / 1,361 ms, against 575 / 933 ms with this threshold).
 */
export function isBacklog(config: Config, picked: number): boolean {
  return picked >= Math.min(config.sweepBatchSize, QUEUE_SEND_LIMIT);
}

/**
 * Claims and dispatches runnable work of the given queues (all claimable
 * queues when omitted) until they run dry or the deadline passes. Queues take
 * turns: each pass gives every queue at most one claim batch, round-robin,
 * starting at a random queue, so neither a queue's backlog nor the number of
 * queues (both chosen by tenants) can keep another queue's due work waiting
 * for more than one pass.
 */
export async function dispatchRunnable(
  deps: SweepDeps,
  options: {
    now?: Date;
    queues?: readonly string[];
    deadline?: number;
    /** Called once, when a pass ends with queues that filled their batch (a backlog). */
    onBacklog?: () => Promise<void>;
  } = {},
): Promise<DispatchCounts & { budgetExhausted: boolean }> {
  const elapsed = deps.elapsed ?? Date.now;
  const deadline = options.deadline ?? elapsed() + deps.config.sweepTimeBudgetMs;
  const total = { claimed: 0, dispatched: 0, released: 0, lost: 0, budgetExhausted: false };
  const listed = options.queues ?? (await listClaimableQueues(deps.db));
  const first = Math.min(listed.length - 1, Math.floor((deps.random ?? Math.random)() * listed.length));
  let turn = first > 0 ? [...listed.slice(first), ...listed.slice(0, first)] : [...listed];
  while (turn.length > 0) {
    const next: string[] = [];
    for (const queue of turn) {
      if (elapsed() >= deadline) {
        total.budgetExhausted = true;
        return total;
      }
      const c = await dispatchBatch(deps, queue, options.now);
      total.claimed += c.claimed;
      total.dispatched += c.dispatched;
      total.released += c.released;
      total.lost += c.lost;
      // A backlog (tasks held back by a limit count: the queue may hold more
      // runnable work behind them): this queue again.
      if (isBacklog(deps.config, c.claimed + c.held)) next.push(queue);
    }
    if (next.length > 0 && options.onBacklog) {
      await options.onBacklog();
      options = { ...options, onBacklog: undefined };
    }
    turn = next;
  }
  return total;
}

/** Asks for `n` more dispatchers. A failed send is logged: the next sweep fans out again. */
export async function sendPumps(deps: SweepDeps, n: number): Promise<number> {
  if (!deps.pumps || n <= 0) return 0;
  try {
    await deps.pumps.sendBatch(Array.from({ length: n }, () => ({ body: { kind: 'pump' as const } })));
    return n;
  } catch (error) {
    deps.log.warn('pump messages not sent; the next sweep fans out again', { pumps: n, error });
    return 0;
  }
}

/** A dispatcher slot's lease outlasts its deadline by one statement timeout and this. */
const DISPATCHER_LEASE_MARGIN_SECONDS = 5;

export interface DispatcherCounts extends DispatchCounts {
  /** The slot held; null when every slot was held (other dispatchers are at work; nothing done). */
  slot: number | null;
  /** The deadline cut it off with work left. */
  budgetExhausted: boolean;
  /** Pump messages sent (the fan-out, and the re-arm). */
  pumps: number;
  /** It re-armed: a pump carries on where its deadline cut it off. */
  rearmed: boolean;
}

/**
 * One dispatcher (issue 13). Holds one of MAX_DISPATCHERS slots in Postgres
 * while it claims and sends (dispatchRunnable, so the queues' turns and each
 * queue's fair order are the same as one sweep's: every claim takes the
 * lowest vtimes not locked by another); finding every slot held, it does
 * nothing, as others are at work. When a pass leaves full batches it asks
 * for `fanOut` more dispatchers at once; when its deadline cuts it off with
 * work left, it gives its slot back and re-arms (one pump message). A
 * dispatcher that dies holds its slot until the slot's lease runs out; what
 * it claimed is the reaper's, as for any sweep.
 */
export async function dispatchAsDispatcher(
  deps: SweepDeps,
  options: { now?: Date; deadline: number; fanOut: number },
): Promise<DispatcherCounts> {
  const { db, config } = deps;
  const faults = deps.faults ?? noFaults;
  const elapsed = deps.elapsed ?? Date.now;
  const counts: DispatcherCounts = { claimed: 0, dispatched: 0, released: 0, lost: 0, slot: null, budgetExhausted: false, pumps: 0, rearmed: false };
  const leaseSeconds =
    Math.ceil(Math.max(0, options.deadline - elapsed()) / 1000) +
    Math.ceil(config.sweepStatementTimeoutMs / 1000) +
    DISPATCHER_LEASE_MARGIN_SECONDS;
  const lease = await acquireDispatcherSlot(db, { now: options.now, max: config.maxDispatchers, holder: deps.workerId, leaseSeconds });
  if (!lease) return counts;
  counts.slot = lease.slot;
  await faults('dispatcher.after_acquire', { slot: lease.slot });
  let result: DispatchCounts & { budgetExhausted: boolean };
  try {
    result = await dispatchRunnable(deps, {
      now: options.now,
      deadline: options.deadline,
      onBacklog: async () => {
        counts.pumps += await sendPumps(deps, options.fanOut);
      },
    });
  } catch (error) {
    // A failed send (its claims already given back) or a lost connection: the slot goes back too.
    await releaseDispatcherSlot(db, lease).catch(() => {});
    throw error;
  }
  Object.assign(counts, result);
  await faults('dispatcher.before_release', { slot: lease.slot });
  await releaseDispatcherSlot(db, lease);
  await faults('dispatcher.after_release', { slot: lease.slot });
  if (counts.budgetExhausted) {
    const sent = await sendPumps(deps, 1);
    counts.pumps += sent;
    counts.rearmed = sent > 0;
  }
  return counts;
}

/** Repeats a bounded step while it fills its batch and time remains. */
async function drain(step: () => Promise<number>, batch: number, deadline: number, elapsed: () => number) {
  let total = 0;
  for (;;) {
    if (elapsed() >= deadline) return { total, exhausted: true };
    const n = await step();
    total += n;
    if (n < batch) return { total, exhausted: false };
  }
}

/**
 * Each step's share of the sweep's time budget. A step must stop starting
 * batches once its share is spent (so a backlog in one step never stops the
 * steps after it); what a step leaves unused passes on to the next, because
 * each deadline is the running sum of the shares. Steps cut off by their share
 * get the time still left after the last step, in order.
 */
export const SWEEP_STEP_SHARES = { reap: 0.15, materialize: 0.2, promote: 0.2, dispatch: 0.35, purge: 0.1 } as const;
type Step = keyof typeof SWEEP_STEP_SHARES;

export async function sweepOnce(deps: SweepDeps, options: { now?: Date } = {}): Promise<SweepCounts> {
  const { db, config } = deps;
  const faults = deps.faults ?? noFaults;
  const now = options.now;
  const elapsed = deps.elapsed ?? Date.now;
  const begin = elapsed();
  const deadline = begin + config.sweepTimeBudgetMs;

  const reaped: ReapCounts = { requeued: 0, retried: 0, dead: 0 };
  const materialized = { schedules: 0, fired: 0, missed: 0 };
  const dispatchCounts: DispatchCounts = { claimed: 0, dispatched: 0, released: 0, lost: 0 };
  let promoted = 0;
  let pumps = 0;
  let purged = 0;
  let spentKeysPurged = 0;
  const flowKeysPurged = { slots: 0, rates: 0 };

  /** Each step runs until its deadline; returns true when it was cut off with work left. */
  const steps: Record<Step, (until: number) => Promise<boolean>> = {
    // 1. Reap expired leases.
    async reap(until) {
      const r = await drain(
        async () => {
          const c = await reapExpiredLeases(db, { now, limit: config.reapBatchSize, dispatchLeaseSeconds: config.dispatchLeaseSeconds });
          reaped.requeued += c.requeued;
          reaped.retried += c.retried;
          reaped.dead += c.dead;
          return c.requeued + c.retried + c.dead;
        },
        config.reapBatchSize,
        until,
        elapsed,
      );
      await faults('sweep.after_reap');
      return r.exhausted;
    },
    // 2. Materialize due schedules into occurrences (look-ahead included).
    async materialize(until) {
      const m = await materializeDueSchedules({ db, config, log: deps.log }, { now, deadline: until, elapsed });
      materialized.schedules += m.schedules;
      materialized.fired += m.fired;
      materialized.missed += m.missed;
      await faults('sweep.after_materialize');
      return m.budgetExhausted;
    },
    // 3. Promote due scheduled tasks (look-ahead included).
    async promote(until) {
      const p = await drain(
        () => promoteDueTasks(db, { now, lookaheadSeconds: config.lookaheadSeconds, limit: config.promoteBatchSize }),
        config.promoteBatchSize,
        until,
        elapsed,
      );
      promoted += p.total;
      await faults('sweep.after_promote');
      return p.exhausted;
    },
    // 4. Claim and dispatch, queues taking turns, lowest vtime first within each.
    async dispatch(until) {
      // Parked tasks whose key has room again (a raised limit, a missed wake).
      await wakeParkedTasks(db, { keys: config.sweepBatchSize });
      if (deps.pumps && config.maxDispatchers > 0) {
        // One dispatcher of MAX_DISPATCHERS; a backlog fans out to the others.
        const d = await dispatchAsDispatcher(deps, { now, deadline: until, fanOut: config.maxDispatchers - 1 });
        dispatchCounts.claimed += d.claimed;
        dispatchCounts.dispatched += d.dispatched;
        dispatchCounts.released += d.released;
        dispatchCounts.lost += d.lost;
        pumps += d.pumps;
        // Cut off with work left and not re-armed: the time other steps leave over carries on.
        return d.budgetExhausted && !d.rearmed;
      }
      const { budgetExhausted, ...c } = await dispatchRunnable(deps, { now, deadline: until });
      dispatchCounts.claimed += c.claimed;
      dispatchCounts.dispatched += c.dispatched;
      dispatchCounts.released += c.released;
      dispatchCounts.lost += c.lost;
      return budgetExhausted;
    },
    // 5. Purge one bounded batch of expired history per tick.
    async purge(until) {
      if (elapsed() >= until) return true;
      const { purged: n, keys } = await purgeFinishedTasks(db, {
        now,
        retentionSeconds: config.retentionSeconds,
        limit: config.purgeBatchSize,
        markRetentionSeconds,
      });
      purged += n;
      if (config.spentKeyRetentionSeconds > 0) {
        spentKeysPurged += await purgeSpentKeys(db, {
          now,
          retentionSeconds: config.spentKeyRetentionSeconds,
          limit: config.purgeBatchSize,
        });
      }
      // After the tasks: a key whose last task this purge deleted goes in the same tick.
      const f = await purgeIdleFlowControl(db, { now, retentionSeconds: config.retentionSeconds, limit: config.purgeBatchSize, keys });
      flowKeysPurged.slots += f.slots;
      flowKeysPurged.rates += f.rates;
      return false;
    },
  };

  // One statement decides whether any step has work: an idle tick costs only it.
  const markRetentionSeconds = config.dispatchLeaseSeconds + config.lookaheadSeconds + MARK_REAPER_MARGIN_SECONDS;
  const idle = !(await probeDueWork(db, {
    now,
    lookaheadSeconds: config.lookaheadSeconds,
    retentionSeconds: config.retentionSeconds,
    markRetentionSeconds,
    spentKeyRetentionSeconds: config.spentKeyRetentionSeconds,
  }));
  // Anything due runs every step, as before: one step's work feeds the next
  // (a reap requeues, a materialization schedules, a promote queues).
  const cutOff: Step[] = [];
  let share = 0;
  for (const step of idle ? [] : (Object.keys(SWEEP_STEP_SHARES) as Step[])) {
    share += SWEEP_STEP_SHARES[step];
    const until = Math.min(deadline, begin + Math.round(share * config.sweepTimeBudgetMs));
    if (await steps[step](until)) cutOff.push(step);
  }
  // Time the other steps left unused goes to those their share cut off.
  let budgetExhausted = false;
  for (const step of cutOff) {
    if (elapsed() >= deadline || (await steps[step](deadline))) budgetExhausted = true;
  }

  return {
    reaped,
    materialized,
    promoted,
    ...dispatchCounts,
    pumps,
    idle,
    purged,
    spentKeysPurged,
    flowKeysPurged,
    budgetExhausted,
  };
}
