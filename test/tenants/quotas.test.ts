// Quotas (issue 10, finding 4): maxPendingTasks checked inside the enqueue
// statement (a batch that would pass it is refused whole, 429 naming the
// quota, Retry-After), maxSchedules and minScheduleIntervalSeconds checked at
// schedule writes (a cron firing every second counts as 1), set through
// PUT /v1/admin/tenants/{tenant} {"quotas"}, defaults from vars.
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { readConfig } from '../../src/config.ts';
import { shortestGapSeconds } from '../../src/tenants/quotas.ts';
import { z } from 'zod';
import { defineTask } from '../../src/handlers/registry.ts';
import { resetTables, T0, at, useTestDatabase } from '../helpers/db.ts';
import { createHarness } from '../helpers/harness.ts';
import { createTestApi } from '../helpers/http.ts';
import { expectPendingCounted } from '../helpers/invariants.ts';

const t = useTestDatabase();
let api: ReturnType<typeof createTestApi>;

beforeEach(async () => {
  await resetTables(t.db);
  api = createTestApi(t.db);
  api.setNow(T0);
});
// A dispatch kick left running by one test's enqueue must not claim the next test's tasks.
afterEach(() => api.settle());

const count = async (tenant: string) =>
  (await t.db.query<{ n: number }>(`select count(*)::int as n from tasks where tenant = $1::text`, [tenant]))[0]!.n;
const enqueue = (tenant: string, body: unknown) => api.admin('POST', '/v1/tasks', { tenant, body });
const batch = (tenant: string, n: number, extra: object = {}) =>
  api.admin('POST', '/v1/tasks/batch', { tenant, body: { tasks: Array.from({ length: n }, () => ({ task: 'noop', delay: 3600, ...extra })) } });

describe('maxPendingTasks', () => {
  it('refuses the enqueue that would pass it, whole, with 429 naming the quota and Retry-After', async () => {
    const set = await api.admin('PUT', '/v1/admin/tenants/small', { body: { quotas: { maxPendingTasks: 5 } } });
    expect(set.status).toBe(200);
    expect(set.body).toEqual({ tenant: 'small', quotas: { maxPendingTasks: 5, maxSchedules: 10_000, minScheduleIntervalSeconds: 1 } });

    // Another tenant's pending tasks never count.
    expect((await batch('other', 10)).status).toBe(201);
    expect((await batch('small', 3)).status).toBe(201);
    const over = await batch('small', 3);
    expect(over.status).toBe(429);
    expect(over.body.error.code).toBe('quota_exceeded');
    expect(over.body.error.message).toMatch(/maxPendingTasks/);
    expect(over.body.error.details).toEqual([{ path: 'maxPendingTasks', message: expect.stringMatching(/limit of 5/) }]);
    expect(Number(over.headers.get('retry-after'))).toBeGreaterThan(0);
    expect(await count('small')).toBe(3); // refused whole: none of the three stored

    expect((await batch('small', 2)).status).toBe(201); // exactly at the limit
    expect((await enqueue('small', { task: 'noop' })).status).toBe(429);
    // Another tenant is not affected.
    expect((await batch('other', 10)).status).toBe(201);
  });

  it("another tenant's backlog never counts against this tenant's quota", async () => {
    expect((await api.admin('PUT', '/v1/admin/tenants/small', { body: { quotas: { maxPendingTasks: 5 } } })).status).toBe(200);
    expect((await batch('big', 20)).status).toBe(201);
    expect((await batch('small', 5)).status).toBe(201);
    expect((await enqueue('small', { task: 'noop' })).status).toBe(429);
  });

  it('counts scheduled, queued and running tasks; finished ones free room; reschedules by key never count', async () => {
    await api.admin('PUT', '/v1/admin/tenants/small', { body: { quotas: { maxPendingTasks: 2 } } });
    const h = createHarness(t.db);
    expect((await enqueue('small', { task: 'noop', idempotencyKey: 'a' })).status).toBe(201); // queued
    expect((await enqueue('small', { task: 'noop', delay: 3600, idempotencyKey: 'b' })).status).toBe(201); // scheduled
    expect((await enqueue('small', { task: 'noop' })).status).toBe(429);
    // Rescheduling a held key adds nothing.
    expect((await enqueue('small', { task: 'noop', delay: 60, idempotencyKey: 'b' })).status).toBe(200);
    await api.settle(); // the enqueue's dispatch: 'a' is running now
    expect((await enqueue('small', { task: 'noop' })).status).toBe(429);
    await h.consume(api.outbox.take().map((m) => m.body), { now: T0 }); // 'a' succeeded
    expect((await enqueue('small', { task: 'noop', delay: 3600 })).status).toBe(201);
  });

  it('null returns a quota to the default from vars; weight and queue still work alone and together', async () => {
    api = createTestApi(t.db, { config: readConfig({ QUOTA_MAX_PENDING_TASKS: '4' }) });
    api.setNow(T0);
    expect((await batch('d', 5)).status).toBe(429);
    await api.admin('PUT', '/v1/admin/tenants/d', { body: { quotas: { maxPendingTasks: 100 } } });
    expect((await batch('d', 5)).status).toBe(201);
    const reset = await api.admin('PUT', '/v1/admin/tenants/d', { body: { quotas: { maxPendingTasks: null } } });
    expect(reset.body.quotas.maxPendingTasks).toBe(4);
    expect((await batch('d', 1)).status).toBe(429);

    expect((await api.admin('PUT', '/v1/admin/tenants/d', { body: { queue: 'mail', weight: 2 } })).body).toEqual({ tenant: 'd', queue: 'mail', weight: 2 });
    const both = await api.admin('PUT', '/v1/admin/tenants/d', { body: { weight: 3, quotas: { maxSchedules: 7 } } });
    expect(both.body).toEqual({ tenant: 'd', queue: 'default', weight: 3, quotas: { maxPendingTasks: 4, maxSchedules: 7, minScheduleIntervalSeconds: 1 } });
  });

  it('refuses bad quota bodies with a 400 naming the field', async () => {
    const cases: [unknown, string][] = [
      [{}, 'weight'],
      [{ quotas: { maxPendingTasks: -1 } }, 'quotas.maxPendingTasks'],
      [{ quotas: { maxPendingTasks: 1.5 } }, 'quotas.maxPendingTasks'],
      [{ quotas: { maxSchedules: 'many' } }, 'quotas.maxSchedules'],
      [{ quotas: { minScheduleIntervalSeconds: 0 } }, 'quotas.minScheduleIntervalSeconds'],
      [{ quotas: { surprise: 1 } }, 'quotas.surprise'],
    ];
    for (const [body, field] of cases) {
      const r = await api.admin('PUT', '/v1/admin/tenants/x', { body });
      expect(r.status, JSON.stringify(body)).toBe(400);
      expect(r.body.error.details.map((d: { path: string }) => d.path), JSON.stringify(body)).toContain(field);
    }
    expect((await t.db.query(`select 1 from tenant_quotas`)).length).toBe(0);
  });

  it('concurrent enqueues of one tenant overshoot by at most what all but one of them add', async () => {
    await api.admin('PUT', '/v1/admin/tenants/race', { body: { quotas: { maxPendingTasks: 10 } } });
    const replies = await Promise.all(Array.from({ length: 8 }, () => batch('race', 4)));
    const accepted = replies.filter((r) => r.status === 201).length;
    expect(replies.every((r) => r.status === 201 || r.status === 429)).toBe(true);
    expect(accepted).toBeGreaterThanOrEqual(2);
    // The bound the README states: limit + (concurrent statements - 1) * batch size.
    expect(await count('race')).toBeLessThanOrEqual(10 + 7 * 4);
    expect(await count('race')).toBe(accepted * 4);
  });

  it('replay, bulk replay and a schedule trigger count against it like an enqueue (429, nothing written)', async () => {
    await api.admin('PUT', '/v1/admin/tenants/small', { body: { quotas: { maxPendingTasks: 3 } } });
    const sched = await api.admin('PUT', '/v1/schedules/nightly', { tenant: 'small', body: { task: 'noop', cron: '0 3 * * *', enabled: false } });
    expect(sched.status).toBe(201);
    expect((await batch('small', 3)).status).toBe(201);
    const cancelled = await api.admin('POST', '/v1/tasks/bulk-cancel', { tenant: 'small', body: { status: ['scheduled'] } });
    expect(cancelled.body.affected).toBe(3);
    const [a, b, c] = cancelled.body.ids as string[];
    expect((await batch('small', 2)).status).toBe(201); // 2 pending, room for 1
    expect((await batch('other', 10)).status).toBe(201); // another tenant's pending tasks never count

    expect((await api.admin('POST', `/v1/tasks/${a}/replay`, { tenant: 'small' })).status).toBe(201); // 3: at the limit
    const pending = await count('small');
    const refused = [
      await api.admin('POST', `/v1/tasks/${b}/replay`, { tenant: 'small' }),
      await api.admin('POST', '/v1/tasks/bulk-replay', { tenant: 'small', body: { status: ['cancelled'] } }),
      await api.admin('POST', '/v1/schedules/nightly/trigger', { tenant: 'small' }),
    ];
    for (const r of refused) {
      expect(r.status, JSON.stringify(r.body)).toBe(429);
      expect(r.body.error.code).toBe('quota_exceeded');
      expect(r.body.error.details).toEqual([{ path: 'maxPendingTasks', message: expect.stringMatching(/limit of 3/) }]);
      expect(Number(r.headers.get('retry-after'))).toBeGreaterThan(0);
    }
    expect(await count('small')).toBe(pending);
    // Replaying again what was already replayed adds nothing, so it is never refused.
    expect((await api.admin('POST', `/v1/tasks/${a}/replay`, { tenant: 'small' })).status).toBe(200);

    // Room again: up to the limit exactly.
    await api.admin('POST', '/v1/tasks/bulk-cancel', { tenant: 'small', body: { status: ['scheduled', 'queued'], limit: 2 } });
    const replayed = await api.admin('POST', '/v1/tasks/bulk-replay', { tenant: 'small', body: { ids: [b, c] } });
    expect(replayed.status).toBe(200);
    expect(replayed.body.ids).toEqual([b, c]);
    expect((await api.admin('POST', '/v1/schedules/nightly/trigger', { tenant: 'small' })).status).toBe(429);
    await api.admin('POST', '/v1/tasks/bulk-cancel', { tenant: 'small', body: { ids: [replayed.body.replayIds[0]] } });
    expect((await api.admin('POST', '/v1/schedules/nightly/trigger', { tenant: 'small' })).status).toBe(201);
  });
});

// maxPendingTasks reads the tenant's pending count (migration 0021), kept by
// every statement that creates pending tasks or takes them out of pending.
// Each step below goes through one such statement; the count must agree with
// the tasks after each (a statement that forgot it turns this red).
describe('the pending count', () => {
  const failing = defineTask('failing', z.object({}).default({}), async () => {
    throw new Error('boom');
  });
  const pending = async () =>
    (await t.db.query<{ n: number }>(`select count(*)::int as n from tasks where status in ('scheduled', 'queued', 'running')`))[0]!.n;

  it('follows every statement into and out of pending', async () => {
    const h = createHarness(t.db, { handlers: [failing] });
    api = createTestApi(t.db, { handlers: [failing] });
    // A sweep cut off by its time budget on a loaded machine sends nothing and ends a drain early.
    const drainAll = async (now: Date) => {
      for (let i = 0; i < 10 && (await pending()) > 0; i++) await h.drain({ now });
    };
    const step = async (expected: number) => {
      expect(await pending()).toBe(expected);
      await expectPendingCounted(t.db);
    };
    // Enqueue: the plain batch, a keyed one, a reschedule and a deduplication by key (nothing new).
    await h.enqueue([{ task: 'noop', delay: 3600 }, { task: 'noop', delay: 3600 }], { now: T0 });
    await step(2);
    await h.enqueue([{ task: 'noop', delay: 3600, idempotencyKey: 'k' }, { task: 'noop', delay: 3600 }], { now: T0 });
    await step(4);
    await h.enqueue({ task: 'noop', delay: 60, idempotencyKey: 'k' }, { now: T0 });
    await step(4);
    // Finish: succeeded (out), failed with attempts left (still pending), dead (out).
    await h.enqueue([{ task: 'noop' }, { task: 'failing', maxAttempts: 2 }], { now: T0 });
    await step(6);
    await h.sweep({ now: T0 });
    await h.consume(h.outbox.take().map((m) => m.body), { now: T0 });
    await step(5);
    await drainAll(at(3600));
    await step(0);
    // Reaper: a lost attempt with none left is dead.
    await h.enqueue({ task: 'noop', maxAttempts: 1 }, { now: at(4000) });
    await h.sweep({ now: at(4000) });
    h.outbox.take();
    await step(1);
    await h.sweep({ now: at(5000) });
    await step(0);
    // Cancel and bulk cancel. The API's clock travels with the harness: a
    // replay due at the real now() would drift past the drains' override as
    // the wall clock does.
    api.setNow(at(5000));
    const [one, two] = await h.enqueue([{ task: 'noop', delay: 3600 }, { task: 'noop', delay: 3600 }], { now: at(5000) });
    await step(2);
    expect((await api.admin('DELETE', `/v1/tasks/${one!.task!.id}`, { tenant: 'acme' })).status).toBe(200);
    await step(1);
    expect((await api.admin('POST', '/v1/tasks/bulk-cancel', { tenant: 'acme', body: { ids: [two!.task!.id] } })).body.affected).toBe(1);
    await step(0);
    // Replay (one and bulk).
    expect((await api.admin('POST', `/v1/tasks/${one!.task!.id}/replay`, { tenant: 'acme' })).status).toBe(201);
    await step(1);
    expect((await api.admin('POST', '/v1/tasks/bulk-replay', { tenant: 'acme', body: { ids: [two!.task!.id] } })).status).toBe(200);
    await step(2);
    // The replays' dispatch kick claims them: deliver what it sent.
    await api.settle();
    await h.consume(api.outbox.take().map((m) => m.body), { now: at(5000) });
    await drainAll(at(9000));
    await step(0);
    // Schedules: materialized occurrences, a trigger, replace, pause, delete.
    api.setNow(at(10_000));
    const put = (body: object) => api.admin('PUT', '/v1/schedules/tick', { tenant: 'acme', body: { task: 'noop', interval: 10, ...body } });
    expect((await put({})).status).toBe(201);
    await h.sweep({ now: at(10_000) });
    h.outbox.take();
    const planned = await pending();
    expect(planned).toBeGreaterThan(1);
    await step(planned);
    expect((await api.admin('POST', '/v1/schedules/tick/trigger', { tenant: 'acme' })).status).toBe(201);
    await step(planned + 1);
    expect((await put({ payload: {} })).status).toBe(200); // withdraws the occurrences planned early
    expect(await pending()).toBeLessThan(planned);
    await step(await pending());
    await h.sweep({ now: at(10_005) });
    h.outbox.take();
    api.setNow(at(10_025));
    expect((await api.admin('POST', '/v1/schedules/tick/pause', { tenant: 'acme' })).status).toBe(200);
    await step(0);
    // Resumed an hour later with misfire skip: the late fire times are recorded missed (never pending).
    expect((await put({ misfire: 'skip', enabled: false })).status).toBe(200);
    api.setNow(at(14_000));
    expect((await api.admin('POST', '/v1/schedules/tick/resume', { tenant: 'acme' })).status).toBe(200);
    await h.sweep({ now: at(14_000) });
    h.outbox.take();
    const [missed] = await t.db.query<{ n: number }>(`select count(*)::int as n from tasks where status = 'missed'`);
    expect(missed!.n).toBeGreaterThan(0);
    await step(await pending());
    expect(await pending()).toBeGreaterThan(0);
    expect((await api.admin('DELETE', '/v1/schedules/tick', { tenant: 'acme' })).status).toBe(200);
    await step(0);
  });
});

describe('schedule quotas', () => {
  const put = (tenant: string, name: string, body: object) => api.admin('PUT', `/v1/schedules/${name}`, { tenant, body: { task: 'noop', ...body } });

  it('maxSchedules refuses a new schedule past the limit, but a replacement always goes through', async () => {
    await api.admin('PUT', '/v1/admin/tenants/s', { body: { quotas: { maxSchedules: 2 } } });
    // Another tenant's schedules never count.
    for (const name of ['a', 'b', 'c']) expect((await put('other', name, { interval: 60 })).status).toBe(201);
    expect((await put('s', 'a', { interval: 60 })).status).toBe(201);
    expect((await put('s', 'b', { interval: 60 })).status).toBe(201);
    const over = await put('s', 'c', { interval: 60 });
    expect(over.status).toBe(429);
    expect(over.body.error).toMatchObject({ code: 'quota_exceeded', details: [{ path: 'maxSchedules' }] });
    expect(over.headers.get('retry-after')).toBeNull(); // waiting does not help
    expect((await put('s', 'b', { interval: 120 })).status).toBe(200);
    expect((await t.db.query(`select 1 from schedules where tenant = 's'`)).length).toBe(2);
    expect((await put('other', 'd', { interval: 60 })).status).toBe(201);
  });

  it('minScheduleIntervalSeconds refuses schedules that fire more often, whatever their kind', async () => {
    await api.admin('PUT', '/v1/admin/tenants/s', { body: { quotas: { minScheduleIntervalSeconds: 120 } } });
    const refused: object[] = [
      { cron: '* * * * * *', timezone: 'UTC' }, // every second
      { cron: '0,30 * * * * *', timezone: 'UTC' }, // every 30 s
      { cron: '0 9,10 * * *', timezone: 'Europe/Paris' }, // hourly would do; see the next
      { cron: '0,59 0,23 * * *', timezone: 'UTC' }, // 23:59 then 00:00 next day: 60 s
      { interval: 119 },
      { recurrence: { every: 1, unit: 'minutes', start: at(0).toISOString() }, timezone: 'UTC' },
    ];
    // 09:00 and 10:00 are an hour apart: allowed.
    const allowed = refused.splice(2, 1);
    for (const body of refused) {
      const r = await put('s', 'x', body);
      expect(r.status, JSON.stringify(body)).toBe(429);
      expect(r.body.error.details[0].path).toBe('minScheduleIntervalSeconds');
      expect(r.headers.get('retry-after')).toBeNull();
    }
    expect((await t.db.query(`select 1 from schedules where tenant = 's'`)).length).toBe(0);
    const ok = [...allowed, { cron: '*/2 * * * *', timezone: 'UTC' }, { interval: 120 }, { at: at(3600).toISOString() }];
    for (const [i, body] of ok.entries()) expect((await put('s', `y${i}`, body)).status, JSON.stringify(body)).toBe(201);
  });
});

describe('the shortest gap of a schedule', () => {
  it('comes from the recurrence maths: cron seconds count, DST shortens a calendar day', () => {
    expect(shortestGapSeconds({ kind: 'cron', cron: '* * * * * *', timezone: 'UTC' }, T0)).toBe(1);
    expect(shortestGapSeconds({ kind: 'cron', cron: '*/15 * * * *', timezone: 'UTC' }, T0)).toBe(900);
    expect(shortestGapSeconds({ kind: 'cron', cron: '59 23 * * *', timezone: 'UTC' }, T0)).toBe(86_400);
    expect(shortestGapSeconds({ kind: 'interval', intervalSeconds: 7, anchor: T0 }, T0)).toBe(7);
    expect(shortestGapSeconds({ kind: 'recurrence', every: 2, unit: 'hours', start: T0, timezone: 'UTC' }, T0)).toBe(7200);
    // Daily at 09:00 New York across 2027-03-14 (spring forward): a 23-hour day.
    const daily = { kind: 'recurrence', every: 1, unit: 'days', start: new Date('2027-03-01T14:00:00Z'), timezone: 'America/New_York' } as const;
    expect(shortestGapSeconds(daily, new Date('2027-03-01T00:00:00Z'))).toBe(23 * 3600);
    expect(shortestGapSeconds({ kind: 'once', at: T0 }, T0)).toBeNull();
    // Every second of a fifth Monday in February: first in 2044, past the 800 days sampled.
    expect(shortestGapSeconds({ kind: 'cron', cron: '* * * * 2 1#5', timezone: 'UTC' }, T0)).toBe(1);
    // Once every four years: no two fires within 800 days of the first.
    expect(shortestGapSeconds({ kind: 'cron', cron: '0 0 29 2 *', timezone: 'UTC' }, T0)).toBeNull();
  });
});
