// GET /metrics: parsed with a real Prometheus text parser and checked against
// the database; scoped by credential; the tenant label folded past the cap;
// only the recent window counted.
import parsePrometheusTextFormat, { type ParsedFamily } from 'parse-prometheus-text-format';
import { beforeEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { PermanentError } from '../../src/handlers/errors.ts';
import { defineTask } from '../../src/handlers/registry.ts';
import { renderMetrics } from '../../src/metrics/exposition.ts';
import { cancelTask } from '../../src/tasks/cancel.ts';
import { at, resetTables, T0, useTestDatabase } from '../helpers/db.ts';
import { createHarness, type Harness } from '../helpers/harness.ts';
import { ADMIN_TOKEN, createTestApi } from '../helpers/http.ts';

const t = useTestDatabase();
const handlers = [
  defineTask('fatal', z.object({}).default({}), async () => {
    throw new PermanentError('bad recipient');
  }),
];
let h: Harness;
let api: ReturnType<typeof createTestApi>;

beforeEach(async () => {
  await resetTables(t.db);
  h = createHarness(t.db, { handlers });
  api = createTestApi(t.db, { handlers, config: { metricsMaxTenants: 3 } });
});

interface Series {
  labels: Record<string, string>;
  value: number;
}

/**
 * Parses the exposition. The parser keeps only unlabelled _sum/_count of a
 * summary (it folds labelled series into one), so summaries are read a second
 * time as untyped samples, which keeps every series with its labels.
 */
function parse(text: string): { families: ParsedFamily[]; series: (name: string) => Series[] } {
  const families = parsePrometheusTextFormat(text);
  const untyped = parsePrometheusTextFormat(text.replace(/^# TYPE (\S+) summary$/gm, '# TYPE $1 untyped'));
  const series = (name: string) =>
    untyped.filter((f) => f.name === name).flatMap((f) => f.metrics.map((m) => ({ labels: m.labels ?? {}, value: Number(m.value) })));
  return { families, series };
}

const key = (l: Record<string, string>, names: string[]) => names.map((n) => l[n]).join('|');

async function scrape(token: string, now: Date) {
  api.setNow(now);
  const res = await api.call('GET', '/metrics', { token });
  expect(res.status).toBe(200);
  expect(res.headers.get('content-type')).toBe('text/plain; version=0.0.4; charset=utf-8');
  return parse(res.body as string);
}

/** A small world at T0: done, dead, waiting and old history for two tenants. */
async function seed(): Promise<void> {
  // Old history: finished an hour before the scrape, outside every window.
  await h.enqueue([{ task: 'noop' }, { task: 'noop' }], { now: at(-3600), tenant: 'acme' });
  await h.drain({ now: at(-3599) });
  // Recent: three succeed two seconds late, one dies, in two queues.
  await h.enqueue([{ task: 'noop' }, { task: 'noop' }, { task: 'noop', queue: 'mail' }], { now: T0, tenant: 'acme' });
  await h.enqueue([{ task: 'fatal' }], { now: T0, tenant: 'acme' });
  await h.enqueue([{ task: 'noop' }], { now: T0, tenant: 'bolt' });
  await h.drain({ now: at(2) });
  // Recent but never started: a cancelled task (no due-to-start, no run duration).
  const [late] = await h.enqueue([{ task: 'noop', delay: 600 }], { now: T0, tenant: 'acme' });
  await cancelTask(t.db, 'acme', { id: late!.task!.id }, at(5));
  // Waiting: two due 30 s before the scrape (queued), one far in the future.
  await h.enqueue([{ task: 'noop' }, { task: 'noop' }, { task: 'noop', delay: 3600 }], { now: at(30), tenant: 'acme' });
  await h.enqueue([{ task: 'noop', queue: 'mail', delay: 3600 }], { now: at(30), tenant: 'bolt' });
}

describe('GET /metrics', () => {
  it('matches the database: live tasks by status, oldest due age, recent outcomes and summaries', async () => {
    await seed();
    const now = at(60);
    const { families, series } = await scrape(ADMIN_TOKEN, now);
    const types = Object.fromEntries(families.map((f) => [f.name, f.type]));
    expect(types).toMatchObject({
      scheduler_tasks: 'GAUGE',
      scheduler_oldest_due_task_age_seconds: 'GAUGE',
      scheduler_tasks_finished_recent: 'GAUGE',
      scheduler_task_due_to_start_seconds: 'SUMMARY',
      scheduler_task_run_duration_seconds: 'SUMMARY',
      scheduler_dispatch_delay_seconds: 'SUMMARY',
      scheduler_claimed_undispatched_tasks: 'GAUGE',
      scheduler_expired_leases: 'GAUGE',
      scheduler_queue_paused: 'GAUGE',
    });

    // Live tasks, straight from the table.
    const live = await t.db.query<{ queue: string; tenant: string; status: string; n: number }>(
      `select queue, tenant, status, count(*)::int as n from tasks where status in ('scheduled', 'queued', 'running') group by 1, 2, 3`,
    );
    expect(live.length).toBeGreaterThanOrEqual(3);
    const got = Object.fromEntries(series('scheduler_tasks').map((s) => [key(s.labels, ['queue', 'tenant', 'status']), s.value]));
    expect(got).toEqual(Object.fromEntries(live.map((r) => [`${r.queue}|${r.tenant}|${r.status}`, r.n])));

    // Oldest due: computed from run_at in SQL.
    const [oldest] = await t.db.query<{ age: number }>(
      `select extract(epoch from $1::timestamptz - min(run_at))::float8 as age from tasks
       where tenant = 'acme' and queue = 'default' and status in ('scheduled', 'queued') and run_at <= $1::timestamptz`,
      [now],
    );
    expect(oldest!.age).toBe(30);
    const age = series('scheduler_oldest_due_task_age_seconds').find((s) => s.labels.tenant === 'acme' && s.labels.queue === 'default');
    expect(age?.value).toBe(oldest!.age);

    // Finished in the last five minutes, by outcome; the hour-old rows are not counted.
    const recent = await t.db.query<{ queue: string; tenant: string; status: string; n: number; started: number; due: number; run: number }>(
      `select queue, tenant, status, count(*)::int as n, count(started_at)::int as started,
              coalesce(sum(extract(epoch from started_at - run_at)), 0)::float8 as due,
              coalesce(sum(extract(epoch from finished_at - started_at)), 0)::float8 as run
       from tasks where finished_at > $1::timestamptz - interval '5 minutes' and finished_at <= $1::timestamptz group by 1, 2, 3`,
      [now],
    );
    const finished = Object.fromEntries(series('scheduler_tasks_finished_recent').map((s) => [key(s.labels, ['queue', 'tenant', 'outcome']), s.value]));
    expect(finished).toEqual(Object.fromEntries(recent.map((r) => [`${r.queue}|${r.tenant}|${r.status}`, r.n])));
    expect(finished['default|acme|succeeded']).toBe(2);
    expect(finished['default|acme|dead']).toBe(1);
    expect(finished['default|acme|cancelled']).toBe(1);
    const [{ total }] = (await t.db.query<{ total: number }>(`select count(*)::int as total from tasks where finished_at is not null`)) as [{ total: number }];
    expect(Object.values(finished).reduce((a, b) => a + b, 0)).toBe(total - 2);

    // Summaries: count and sum agree with the rows that started (each 2 s late); the cancelled one has none.
    expect(recent.find((r) => r.status === 'cancelled')?.started).toBe(0);
    for (const r of recent) {
      const labels = (s: Series) => key(s.labels, ['queue', 'tenant', 'outcome']) === `${r.queue}|${r.tenant}|${r.status}`;
      expect(series('scheduler_task_due_to_start_seconds_count').find(labels)?.value).toBe(r.started);
      expect(series('scheduler_task_due_to_start_seconds_sum').find(labels)?.value).toBeCloseTo(r.due, 6);
      expect(series('scheduler_task_run_duration_seconds_sum').find(labels)?.value).toBeCloseTo(r.run, 6);
    }
    const p50 = series('scheduler_task_due_to_start_seconds').find(
      (s) => s.labels.queue === 'default' && s.labels.tenant === 'acme' && s.labels.outcome === 'succeeded' && s.labels.quantile === '0.5',
    );
    expect(p50?.value).toBe(2);
  });

  it('a tenant key sees only its own tenant; no key is a 401', async () => {
    await seed();
    await h.enqueue([{ task: 'noop', queue: 'acme-only', delay: 3600 }], { now: T0, tenant: 'acme' });
    expect((await api.admin('PUT', '/v1/admin/queues/acme-only', { body: { paused: true } })).status).toBe(200);
    const created = await api.admin('POST', '/v1/admin/keys', { body: { tenant: 'bolt' } });
    const { series } = await scrape(created.body.key, at(60));
    const tenants = new Set(
      ['scheduler_tasks', 'scheduler_tasks_finished_recent', 'scheduler_task_due_to_start_seconds_count'].flatMap((n) => series(n).map((s) => s.labels.tenant)),
    );
    expect([...tenants]).toEqual(['bolt']);
    expect(series('scheduler_tasks').map((s) => key(s.labels, ['queue', 'status']))).toEqual(['mail|scheduled']);
    // Queues: those bolt uses, never acme's own.
    expect(series('scheduler_queue_paused').map((s) => s.labels.queue)).toEqual(['default', 'mail']);
    const all = await scrape(ADMIN_TOKEN, at(60));
    expect(all.series('scheduler_queue_paused').find((s) => s.labels.queue === 'acme-only')?.value).toBe(1);

    api.setNow(undefined);
    expect((await api.call('GET', '/metrics')).status).toBe(401);
    expect((await api.call('GET', '/metrics', { token: 'edsk_nope' })).status).toBe(401);
  });

  it('names the busiest tenants up to the cap and folds the rest into tenant="other", losing no task', async () => {
    // Six tenants with 6..1 waiting tasks; the cap is 3.
    for (let i = 0; i < 6; i++) {
      await h.enqueue(Array.from({ length: 6 - i }, () => ({ task: 'noop', delay: 600 })), { now: T0, tenant: `tenant-${i}` });
    }
    const { series } = await scrape(ADMIN_TOKEN, at(1));
    const s = series('scheduler_tasks');
    expect(Object.fromEntries(s.map((x) => [x.labels.tenant, x.value]))).toEqual({ 'tenant-0': 6, 'tenant-1': 5, 'tenant-2': 4, other: 6 });
    expect(series('scheduler_metrics_tenants')[0]?.value).toBe(6);
  });

  it('escapes label values so the exposition parses back to the same strings', () => {
    const hostile = 'a"b\\c\nd}{,=';
    const text = renderMetrics(
      {
        live: [{ queue: 'q', tenant: hostile, status: 'queued', count: 2, oldestDueSeconds: 1.5, undispatched: 0, leaseExpired: 0, claimedEarly: 0 }],
        recent: [],
        queues: [],
        tenantsSeen: 1,
      },
      { windowSeconds: 300, maxTenants: 20 },
    );
    const { series } = parse(text);
    expect(series('scheduler_tasks')).toEqual([{ labels: { queue: 'q', tenant: hostile, status: 'queued' }, value: 2 }]);
  });
});
