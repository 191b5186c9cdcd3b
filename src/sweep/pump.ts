// The pump (issue 13): continuous, parallel dispatch beyond the cron tick.
//
// A sweep whose dispatch pass leaves full batches (a backlog of due work)
// sends pump messages to the Queue (sweep.ts, dispatchAsDispatcher). The
// consumer that receives one becomes a dispatcher for PUMP_TIME_BUDGET_MS:
// it takes a dispatcher slot (MAX_DISPATCHERS at once, in Postgres), claims
// and sends batches as the sweep does, gives the slot back and, while the
// backlog lasts, re-arms with one pump message. A pump that finds every slot
// held does nothing: the others are at work. The cron sweep fans out again
// every minute, so a pump lost in transit or a dispatcher that died costs at
// most a minute of parallelism (its slot's lease), never a task.
//
// Chosen over "consumers claim the next batch when they finish theirs": that
// ties dispatch to handler time (a slow handler stops dispatch) and to
// whether any task is running at all (nothing to finish: nothing claims);
// pumps dispatch at the rate the Queue and Postgres allow, whatever the
// handlers do, and their number has a cap of its own.
import { dispatchAsDispatcher, type DispatcherCounts, type SweepDeps } from './sweep.ts';

/** One pump invocation: dispatches for at most PUMP_TIME_BUDGET_MS, re-arming while a backlog lasts. */
export async function runPump(deps: SweepDeps, options: { now?: Date } = {}): Promise<DispatcherCounts> {
  const elapsed = deps.elapsed ?? Date.now;
  return dispatchAsDispatcher(deps, { now: options.now, deadline: elapsed() + deps.config.pumpTimeBudgetMs, fanOut: 0 });
}
