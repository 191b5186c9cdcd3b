// Statements behind the dashboard's charts and GET /metrics. Both read only
// what their partial indexes bound: live tasks (scheduled, queued, running:
// tasks_due_order_idx, tasks_pending_tenant_idx, tasks_running_idx; the
// queued arm counts parked tasks too, which tasks_runnable_idx leaves out,
// so it reads the pending index) and tasks finished in
// a recent window (a range of tasks_finished_idx on finished_at). Neither
// ever scans the finished history, so their cost follows the live work and
// the recent throughput, not the number of rows retention keeps.
import type { Queryable } from '../seam.ts';
import { sql } from '../seam.ts';

type Now = Date | null | undefined;
const at = (now: Now) => now ?? null;

export interface MinuteStats {
  queue: string;
  /** Start of the minute (UTC). */
  minute: Date;
  /** Finished in that minute, by outcome (succeeded, dead, cancelled, missed). */
  finished: Record<string, number>;
  /** Due-to-start latency of those tasks that started (seconds); null when none did. */
  dueToStartP50: number | null;
  dueToStartP99: number | null;
}

/**
 * Per queue and minute over the last `minutes`: tasks finished by outcome and
 * the p50/p99 of due-to-start (started_at - run_at, floored at 0: a task
 * claimed early starts on its second, not before). One statement: the
 * grouping sets give the per-outcome counts and the per-minute percentiles.
 * Reads a finished_at range of tasks_finished_idx (its predicate is repeated
 * verbatim so the planner can use it); takes no locks.
 *
 * window_bound_in_index: the window's ends are the clock's value, not a join
 * with the clock, so they are the index's condition. Joined, over statistics
 * of an older history, the planner read the table whole for the window.
 */
const tasksFinishedPerMinute = sql(
  'tasks_finished_per_minute',
  `with clock as (select coalesce($1::timestamptz, now()) as now)
   select t.queue, date_trunc('minute', t.finished_at) as minute, t.status,
          count(*)::int as n,
          percentile_cont(0.5) within group (order by greatest(extract(epoch from t.started_at - t.run_at), 0))
            filter (where t.started_at is not null) as p50,
          percentile_cont(0.99) within group (order by greatest(extract(epoch from t.started_at - t.run_at), 0))
            filter (where t.started_at is not null) as p99
   from tasks t
   where t.status in ('succeeded', 'dead', 'cancelled', 'missed')
     and t.finished_at > (select now from clock) - make_interval(mins => $3::int)
     and t.finished_at <= (select now from clock)
     and t.tenant = $2::text
   group by grouping sets ((t.queue, minute, t.status), (t.queue, minute))
   order by t.queue, minute`,
);

export async function finishedPerMinute(q: Queryable, p: { now?: Now; tenant: string; minutes: number }): Promise<MinuteStats[]> {
  const rows = await q.query<{ queue: string; minute: Date; status: string | null; n: number; p50: number | null; p99: number | null }>(
    tasksFinishedPerMinute,
    [at(p.now), p.tenant, p.minutes],
  );
  const out = new Map<string, MinuteStats>();
  for (const r of rows) {
    const key = `${r.queue}\u0000${r.minute.toISOString()}`;
    let m = out.get(key);
    if (!m) out.set(key, (m = { queue: r.queue, minute: r.minute, finished: {}, dueToStartP50: null, dueToStartP99: null }));
    if (r.status === null) {
      m.dueToStartP50 = r.p50 === null ? null : Number(r.p50);
      m.dueToStartP99 = r.p99 === null ? null : Number(r.p99);
    } else {
      m.finished[r.status] = r.n;
    }
  }
  return [...out.values()];
}

export interface LiveSeries {
  queue: string;
  tenant: string;
  status: 'scheduled' | 'queued' | 'running';
  count: number;
  /** Seconds the oldest due, waiting task is past its run_at (0: none due). */
  oldestDueSeconds: number;
  /** Running tasks claimed but not yet handed to the Queue. */
  undispatched: number;
  /** Running tasks whose lease has expired: the reaper's backlog. */
  leaseExpired: number;
  /** Running tasks claimed early (look-ahead): handed over before they are due. */
  claimedEarly: number;
}

export interface RecentSeries {
  queue: string;
  tenant: string;
  status: 'succeeded' | 'dead' | 'cancelled' | 'missed';
  count: number;
  /** Finished after more than one attempt. */
  retried: number;
  /** Of those that started: due-to-start seconds. */
  dueToStart: Summary;
  /** Of those that started: started_at to finished_at seconds. */
  runDuration: Summary;
  /** Of those dispatched: claim-and-send delay past due (dispatched_at - run_at, floored at 0). */
  dispatchDelay: Summary;
}

export interface Summary {
  count: number;
  sum: number;
  p50: number | null;
  p90: number | null;
  p99: number | null;
}

export interface MetricsSnapshot {
  live: LiveSeries[];
  recent: RecentSeries[];
  queues: { queue: string; paused: boolean }[];
  /** Distinct tenants seen before folding (so a scrape can tell how many were folded). */
  tenantsSeen: number;
}

/**
 * Everything GET /metrics reports, in one statement and one round trip.
 * - live: three arms, one per live status, so each reads its own partial
 *   index (a single `status in (...)` would not);
 * - recent: a `window` of tasks_finished_idx on finished_at;
 * - tenants: the `cap` busiest (live plus recent rows) keep their name, the
 *   rest are folded into 'other' before grouping, so the label set is bounded
 *   whatever the number of tenants;
 * - queues: the queues table (one row per queue) for paused.
 * `$2` scopes to one tenant (a tenant key) or null for all (the admin).
 * Takes no locks; a concurrent claim may move a task between two arms, which
 * a scrape tolerates.
 */
const metricsSnapshot = sql(
  'metrics_snapshot',
  `with clock as (select coalesce($1::timestamptz, now()) as now),
   live as (
     select tenant, queue, status, run_at, dispatched_at, lease_expires_at from tasks
       where status = 'scheduled' and ($2::text is null or tenant = $2::text)
     union all
     select tenant, queue, status, run_at, dispatched_at, lease_expires_at from tasks
       where status = 'queued' and ($2::text is null or tenant = $2::text)
     union all
     select tenant, queue, status, run_at, dispatched_at, lease_expires_at from tasks
       where status = 'running' and ($2::text is null or tenant = $2::text)
   ),
   recent as (
     select t.tenant, t.queue, t.status, t.attempts,
            -- greatest() skips nulls: the case keeps a task that never started out of the summary
            case when t.started_at is not null then greatest(extract(epoch from t.started_at - t.run_at), 0) end::float8 as due_to_start,
            extract(epoch from t.finished_at - t.started_at)::float8 as run_duration,
            case when t.dispatched_at is not null then greatest(extract(epoch from t.dispatched_at - t.run_at), 0) end::float8 as dispatch_delay
     from tasks t cross join clock
     where t.status in ('succeeded', 'dead', 'cancelled', 'missed')
       and t.finished_at > clock.now - make_interval(secs => $3::int)
       and t.finished_at <= clock.now
       and ($2::text is null or t.tenant = $2::text)
   ),
   seen as (
     select tenant, count(*) as n from (select tenant from live union all select tenant from recent) x group by tenant
   ),
   named as (select tenant from seen order by n desc, tenant limit $4::int),
   live_f as (
     select coalesce(named.tenant, 'other') as tenant, live.queue, live.status, live.run_at, live.dispatched_at, live.lease_expires_at
     from live left join named using (tenant)
   ),
   recent_f as (
     select coalesce(named.tenant, 'other') as tenant, recent.queue, recent.status, recent.attempts,
            recent.due_to_start, recent.run_duration, recent.dispatch_delay
     from recent left join named using (tenant)
   )
   select
     (select coalesce(json_agg(l), '[]') from (
        select live_f.queue, live_f.tenant, live_f.status, count(*)::int as count,
               coalesce(extract(epoch from clock.now - min(live_f.run_at) filter (
                 where live_f.status in ('scheduled', 'queued') and live_f.run_at <= clock.now)), 0)::float8 as oldest_due,
               (count(*) filter (where live_f.status = 'running' and live_f.dispatched_at is null))::int as undispatched,
               (count(*) filter (where live_f.status = 'running' and live_f.lease_expires_at < clock.now))::int as lease_expired,
               (count(*) filter (where live_f.status = 'running' and live_f.run_at > clock.now))::int as claimed_early
        from live_f cross join clock
        group by live_f.queue, live_f.tenant, live_f.status, clock.now
        order by 1, 2, 3) l) as live,
     (select coalesce(json_agg(r), '[]') from (
        select queue, tenant, status, count(*)::int as count,
               (count(*) filter (where attempts > 1))::int as retried,
               count(due_to_start)::int as started,
               coalesce(sum(due_to_start), 0)::float8 as due_sum,
               percentile_cont(array[0.5, 0.9, 0.99]) within group (order by due_to_start) as due_q,
               coalesce(sum(run_duration), 0)::float8 as run_sum,
               percentile_cont(array[0.5, 0.9, 0.99]) within group (order by run_duration) as run_q,
               count(dispatch_delay)::int as dispatched,
               coalesce(sum(dispatch_delay), 0)::float8 as dispatch_sum,
               percentile_cont(array[0.5, 0.9, 0.99]) within group (order by dispatch_delay) as dispatch_q
        from recent_f
        group by queue, tenant, status
        order by 1, 2, 3) r) as recent,
     (select coalesce(json_agg(json_build_object('queue', q.name, 'paused', q.paused) order by q.name), '[]')
        from queues q
        where $2::text is null or exists (select 1 from live where live.queue = q.name)
                               or exists (select 1 from recent where recent.queue = q.name)) as queues,
     (select count(*)::int from seen) as tenants_seen`,
);

interface LiveJson {
  queue: string;
  tenant: string;
  status: LiveSeries['status'];
  count: number;
  oldest_due: number;
  undispatched: number;
  lease_expired: number;
  claimed_early: number;
}
interface RecentJson {
  queue: string;
  tenant: string;
  status: RecentSeries['status'];
  count: number;
  retried: number;
  started: number;
  due_sum: number;
  due_q: (number | null)[] | null;
  run_sum: number;
  run_q: (number | null)[] | null;
  dispatched: number;
  dispatch_sum: number;
  dispatch_q: (number | null)[] | null;
}

const summary = (count: number, sum: number, q: (number | null)[] | null): Summary => ({
  count,
  sum,
  p50: q?.[0] ?? null,
  p90: q?.[1] ?? null,
  p99: q?.[2] ?? null,
});

export async function readMetricsSnapshot(
  q: Queryable,
  p: { now?: Now; tenant: string | null; windowSeconds: number; maxTenants: number },
): Promise<MetricsSnapshot> {
  const [row] = await q.query<{ live: LiveJson[]; recent: RecentJson[]; queues: { queue: string; paused: boolean }[]; tenants_seen: number }>(
    metricsSnapshot,
    [at(p.now), p.tenant, p.windowSeconds, p.maxTenants],
  );
  return {
    live: row!.live.map((l) => ({
      queue: l.queue,
      tenant: l.tenant,
      status: l.status,
      count: l.count,
      oldestDueSeconds: l.oldest_due,
      undispatched: l.undispatched,
      leaseExpired: l.lease_expired,
      claimedEarly: l.claimed_early,
    })),
    recent: row!.recent.map((r) => ({
      queue: r.queue,
      tenant: r.tenant,
      status: r.status,
      count: r.count,
      retried: r.retried,
      dueToStart: summary(r.started, r.due_sum, r.due_q),
      runDuration: summary(r.started, r.run_sum, r.run_q),
      dispatchDelay: summary(r.dispatched, r.dispatch_sum, r.dispatch_q),
    })),
    queues: row!.queues,
    tenantsSeen: row!.tenants_seen,
  };
}
