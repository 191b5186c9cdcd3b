// The dispatch kick: an enqueue whose task is due now should not wait for the
// next cron tick, so the request claims and dispatches its queue after the
// response (in waitUntil). Off the hot path in three ways:
//  - once per isolate and queue per KICK_INTERVAL_MS (default 250 ms): an
//    enqueue that finds a kick of its queue running or recent in this isolate
//    only marks it to run again (trailing edge), so work enqueued meanwhile is
//    still claimed within one interval, and a burst of enqueues costs a few
//    claims rather than one each;
//  - a kick that finds another claim of the queue at work (a sweep's, or a
//    kick of another isolate) leaves at once rather than queueing behind it on
//    the queue's row, and looks again one interval later;
//  - a kick runs a bounded number of rounds (the cron sweep is the safety net).
import type { Config } from '../config.ts';
import { isClaimFree } from '../db/sql/kick.ts';
import type { Db } from '../db/seam.ts';
import type { Logger } from '../log.ts';
import type { EnqueueResult } from '../tasks/enqueue.ts';
import type { PumpSender, TaskSender } from '../queue/messages.ts';
import { claimBatch, invocationId, isBacklog, sendClaimed, sendPumps } from './sweep.ts';

export interface KickDeps {
  db: Db;
  config: Config;
  sender: TaskSender;
  /** Parallel dispatch (issue 13): a kick that meets a backlog asks for MAX_DISPATCHERS pumps. */
  pumps?: PumpSender;
  log: Logger;
  /** Keeps the kick alive after the response (Workers' ctx.waitUntil). */
  waitUntil(promise: Promise<unknown>): void;
  /** Clock override for tests; production leaves it unset. */
  now?: Date;
}

export interface KickCounts {
  rounds: number;
  claimed: number;
  /** Rounds that found another claim at work and left. */
  busy: number;
}

export interface Kicker {
  /** Dispatches these queues soon: now, or within one interval if a kick ran or runs. */
  kick(deps: KickDeps, queues: readonly string[]): void;
}

interface QueueState {
  running: boolean;
  again: boolean;
  lastStart: number;
  deps?: KickDeps;
}

/** Rounds one kick may run before leaving the rest to the sweep. */
export const MAX_KICK_ROUNDS = 20;

/**
 * A kick whose round started longer ago than this is presumed gone (its
 * invocation's waitUntil was cut off, so it will never report back): the next
 * enqueue starts a new one instead of waiting on it forever.
 */
export const STALE_KICK_MS = 30_000;

export function createKicker(options: {
  intervalMs: number;
  clock?: () => number;
  sleep?: (ms: number) => Promise<void>;
  onDone?: (queue: string, counts: KickCounts) => void;
}): Kicker {
  const clock = options.clock ?? Date.now;
  const sleep = options.sleep ?? ((ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms)));
  const states = new Map<string, QueueState>();

  async function round(deps: KickDeps, queue: string): Promise<{ claimed: number; picked: number; busy: boolean }> {
    if (!(await isClaimFree(deps.db, queue))) return { claimed: 0, picked: 0, busy: true };
    const workerId = invocationId('kick');
    const sweepDeps = { db: deps.db, config: deps.config, sender: deps.sender, log: deps.log, workerId };
    const { claimed, held } = await claimBatch(deps, queue, workerId, deps.now);
    await sendClaimed(sweepDeps, queue, claimed, deps.now);
    // Tasks held back by a concurrency or rate limit (issue 16) fill the batch too: a full one looks again.
    return { claimed: claimed.length, picked: claimed.length + held, busy: false };
  }

  async function run(queue: string, state: QueueState): Promise<void> {
    const counts: KickCounts = { rounds: 0, claimed: 0, busy: 0 };
    let fannedOut = false;
    try {
      for (;;) {
        const wait = state.lastStart + options.intervalMs - clock();
        if (wait > 0) await sleep(wait);
        state.again = false;
        state.lastStart = clock();
        const deps = state.deps!;
        const r = await round(deps, queue);
        counts.rounds += 1;
        counts.claimed += r.claimed;
        if (r.busy) counts.busy += 1;
        // A backlog: more is waiting than one kick a round can keep up with;
        // the pumps take it. The run's first backlog asks for MAX_DISPATCHERS,
        // each later one for one more: pumps leave once they catch up, and a
        // steady stream rebuilds the backlog behind them, which the kick
        // alone (one claim an interval) cannot catch up on. At most one pump
        // message a round; the dispatcher slots cap what they open.
        if (isBacklog(deps.config, r.picked) && deps.pumps && deps.config.maxDispatchers > 0) {
          await sendPumps({ ...deps, workerId: 'kick' }, fannedOut ? 1 : deps.config.maxDispatchers);
          fannedOut = true;
        }
        const more = state.again || r.busy || isBacklog(deps.config, r.picked);
        if (!more || counts.rounds >= MAX_KICK_ROUNDS) break;
      }
    } catch (error) {
      state.deps?.log.error('dispatch after enqueue failed; the next sweep will pick it up', { queue, error });
    } finally {
      state.running = false;
      options.onDone?.(queue, counts);
    }
  }

  return {
    kick(deps, queues) {
      for (const queue of queues) {
        let state = states.get(queue);
        if (!state) {
          // Bounded: one entry per queue name this isolate kicked; queue names are few.
          if (states.size >= 1_000) states.clear();
          state = { running: false, again: false, lastStart: -Infinity };
          states.set(queue, state);
        }
        if (state.running && clock() - state.lastStart < STALE_KICK_MS) {
          // The running kick serves this request too, on its own invocation's
          // connection and bindings; only the clock override is the latest.
          state.again = true;
          state.deps = { ...state.deps!, now: deps.now };
          continue;
        }
        state.running = true;
        state.deps = deps;
        deps.waitUntil(run(queue, state));
      }
    },
  };
}

/** The queues an enqueue should kick: those that got work due now (not deduplicated). */
export function queuesToKick(results: readonly EnqueueResult[]): string[] {
  return [...new Set(results.flatMap((r) => (r.task && r.outcome !== 'deduplicated' && r.task.status === 'queued' ? [r.task.queue] : [])))];
}
