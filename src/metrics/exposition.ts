// Renders a metrics snapshot in the Prometheus text exposition format
// (version 0.0.4). Names, types and label syntax are chosen so an
// OpenMetrics parser accepts them too: gauges and summaries only (no counter
// without _total), every family with HELP and TYPE, label values escaped.
//
// Everything is a gauge over "now" or over the recent window: this Worker
// keeps no state between requests, so it cannot count monotonically; the
// database is the state, and what it can answer cheaply is "how many now" and
// "how many in the last N minutes" (see src/db/sql/stats.ts).
import type { MetricsSnapshot, Summary } from '../db/sql/stats.ts';

export const METRICS_CONTENT_TYPE = 'text/plain; version=0.0.4; charset=utf-8';

type Labels = Record<string, string>;

function escapeLabel(v: string): string {
  return v.replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\n');
}

function labelText(labels: Labels): string {
  const parts = Object.entries(labels).map(([k, v]) => `${k}="${escapeLabel(v)}"`);
  return parts.length ? `{${parts.join(',')}}` : '';
}

function num(n: number | null): string {
  if (n === null || Number.isNaN(n)) return 'NaN';
  if (n === Infinity) return '+Inf';
  if (n === -Infinity) return '-Inf';
  return String(n);
}

class Writer {
  private lines: string[] = [];
  family(name: string, type: 'gauge' | 'summary', help: string): void {
    this.lines.push(`# HELP ${name} ${help}`, `# TYPE ${name} ${type}`);
  }
  sample(name: string, labels: Labels, value: number | null): void {
    this.lines.push(`${name}${labelText(labels)} ${num(value)}`);
  }
  summary(name: string, labels: Labels, s: Summary): void {
    if (s.count > 0) {
      this.sample(name, { ...labels, quantile: '0.5' }, s.p50);
      this.sample(name, { ...labels, quantile: '0.9' }, s.p90);
      this.sample(name, { ...labels, quantile: '0.99' }, s.p99);
    }
    this.sample(`${name}_sum`, labels, s.sum);
    this.sample(`${name}_count`, labels, s.count);
  }
  text(): string {
    return `${this.lines.join('\n')}\n`;
  }
}

export function renderMetrics(s: MetricsSnapshot, o: { windowSeconds: number; maxTenants: number }): string {
  const w = new Writer();
  const window = `${Math.round(o.windowSeconds / 60)}m`;

  w.family('scheduler_tasks', 'gauge', 'Waiting and running tasks by queue, tenant and status (finished tasks: see scheduler_tasks_finished_recent).');
  for (const l of s.live) w.sample('scheduler_tasks', { queue: l.queue, tenant: l.tenant, status: l.status }, l.count);

  w.family('scheduler_oldest_due_task_age_seconds', 'gauge', 'Seconds the oldest due, not yet started task is past its run time (0: none due).');
  const oldest = new Map<string, { queue: string; tenant: string; age: number }>();
  for (const l of s.live) {
    const k = `${l.queue}\u0000${l.tenant}`;
    const cur = oldest.get(k);
    if (!cur || l.oldestDueSeconds > cur.age) oldest.set(k, { queue: l.queue, tenant: l.tenant, age: l.oldestDueSeconds });
  }
  for (const o2 of oldest.values()) w.sample('scheduler_oldest_due_task_age_seconds', { queue: o2.queue, tenant: o2.tenant }, o2.age);

  w.family('scheduler_tasks_finished_recent', 'gauge', `Tasks finished in the last ${window}, by outcome.`);
  for (const r of s.recent) w.sample('scheduler_tasks_finished_recent', { queue: r.queue, tenant: r.tenant, outcome: r.status, window }, r.count);

  w.family('scheduler_tasks_retried_recent', 'gauge', `Tasks finished in the last ${window} after more than one attempt, by outcome.`);
  for (const r of s.recent) w.sample('scheduler_tasks_retried_recent', { queue: r.queue, tenant: r.tenant, outcome: r.status, window }, r.retried);

  w.family('scheduler_task_due_to_start_seconds', 'summary', `Run time to handler start, of tasks finished in the last ${window}.`);
  for (const r of s.recent) w.summary('scheduler_task_due_to_start_seconds', { queue: r.queue, tenant: r.tenant, outcome: r.status }, r.dueToStart);

  w.family('scheduler_task_run_duration_seconds', 'summary', `Handler start to finish, of tasks finished in the last ${window}.`);
  for (const r of s.recent) w.summary('scheduler_task_run_duration_seconds', { queue: r.queue, tenant: r.tenant, outcome: r.status }, r.runDuration);

  w.family(
    'scheduler_dispatch_delay_seconds',
    'summary',
    `Run time to hand-over to the Queue (0 when claimed early), of tasks finished in the last ${window}.`,
  );
  for (const r of s.recent) w.summary('scheduler_dispatch_delay_seconds', { queue: r.queue, tenant: r.tenant, outcome: r.status }, r.dispatchDelay);

  const running = s.live.filter((l) => l.status === 'running');
  w.family('scheduler_claimed_undispatched_tasks', 'gauge', 'Running tasks claimed by a sweep but not yet handed to the Queue.');
  for (const l of running) w.sample('scheduler_claimed_undispatched_tasks', { queue: l.queue, tenant: l.tenant }, l.undispatched);
  w.family('scheduler_claimed_early_tasks', 'gauge', 'Running tasks claimed early by the look-ahead, not yet due.');
  for (const l of running) w.sample('scheduler_claimed_early_tasks', { queue: l.queue, tenant: l.tenant }, l.claimedEarly);
  w.family('scheduler_expired_leases', 'gauge', "Running tasks whose lease has expired: the reaper's backlog.");
  for (const l of running) w.sample('scheduler_expired_leases', { queue: l.queue, tenant: l.tenant }, l.leaseExpired);

  w.family('scheduler_queue_paused', 'gauge', '1 when the queue is paused.');
  for (const q of s.queues) w.sample('scheduler_queue_paused', { queue: q.queue }, q.paused ? 1 : 0);

  w.family('scheduler_metrics_tenants', 'gauge', `Tenants with live or recent tasks; past the busiest ${o.maxTenants} they are summed as tenant="other".`);
  w.sample('scheduler_metrics_tenants', {}, s.tenantsSeen);
  return w.text();
}
