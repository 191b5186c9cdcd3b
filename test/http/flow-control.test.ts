// Flow control over the API (issue 16): validation naming the field with
// nothing stored, the task's options shown back, and a key's slots.
import { beforeEach, describe, expect, it } from 'vitest';
import { useTestDatabase, resetTables } from '../helpers/db.ts';
import { createTestApi } from '../helpers/http.ts';
import { createHarness } from '../helpers/harness.ts';

const t = useTestDatabase();
let api: ReturnType<typeof createTestApi>;
const count = async () => (await t.db.query<{ n: number }>('select count(*)::int as n from tasks'))[0]!.n;

beforeEach(async () => {
  await resetTables(t.db);
  api = createTestApi(t.db);
});

describe('concurrency option', () => {
  const long = { key: 'k'.repeat(257), limit: 3 };
  it.each([
    [{ key: '', limit: 3 }, 'concurrency.key'],
    [long, 'concurrency.key'],
    [{ key: 'k', limit: 0 }, 'concurrency.limit'],
    [{ key: 'k', limit: 1001 }, 'concurrency.limit'],
    [{ key: 'k', limit: 2.5 }, 'concurrency.limit'],
    [{ key: 'k' }, 'concurrency.limit'],
    [{ key: 'k', limit: 3, extra: 1 }, 'concurrency.extra'],
    [{ key: 'k\u0000', limit: 3 }, 'concurrency.key'],
    [{ key: 'k\ud800', limit: 3 }, 'concurrency.key'],
    ['partner', 'concurrency'],
  ])('refuses %# with a 400 naming %s, storing nothing', async (concurrency, path) => {
    const r = await api.admin('POST', '/v1/tasks', { body: { task: 'noop', concurrency } });
    expect(r.status).toBe(400);
    expect(r.body.error.details.map((d: { path: string }) => d.path)).toContain(path);
    const batch = await api.admin('POST', '/v1/tasks/batch', { body: { tasks: [{ task: 'noop' }, { task: 'noop', concurrency }] } });
    expect(batch.status).toBe(400);
    expect(batch.body.error.details.map((d: { path: string }) => d.path)).toContain(`tasks.1.${path}`);
    expect(await count()).toBe(0);
    expect((await t.db.query('select 1 from concurrency_slots')).length).toBe(0);
  });

  it('accepts a key of 256 characters and limits 1 and 1,000, and shows them on the task', async () => {
    for (const concurrency of [{ key: 'k'.repeat(256), limit: 1 }, { key: 'é🙂 /?#', limit: 1000 }]) {
      const r = await api.admin('POST', '/v1/tasks', { body: { task: 'noop', delay: 60, concurrency } });
      expect(r.status).toBe(201);
      expect(r.body.concurrency).toEqual(concurrency);
    }
    const plain = await api.admin('POST', '/v1/tasks', { body: { task: 'noop', delay: 60 } });
    expect(plain.body.concurrency).toBeNull();
  });

  it("GET /v1/concurrency/{key} shows the tenant's running count and limit, 404 for an unknown key or another tenant's", async () => {
    const h = createHarness(t.db);
    await h.enqueue(Array.from({ length: 5 }, () => ({ task: 'noop', concurrency: { key: 'partner/eu', limit: 2 } })));
    await h.sweep();
    const r = await api.admin('GET', `/v1/concurrency/${encodeURIComponent('partner/eu')}`, { tenant: 'acme' });
    expect(r.status).toBe(200);
    expect(r.body).toEqual({ key: 'partner/eu', running: 2, limit: 2, waiting: 3 });
    expect((await api.admin('GET', '/v1/concurrency/partner%2Feu', { tenant: 'other' })).status).toBe(404);
    expect((await api.admin('GET', '/v1/concurrency/nope', { tenant: 'acme' })).status).toBe(404);
    expect((await api.call('GET', '/v1/concurrency/nope')).status).toBe(401);
    expect((await api.admin('GET', `/v1/concurrency/${'k'.repeat(257)}`, { tenant: 'acme' })).status).toBe(400);
    for (const route of ['/v1/concurrency', '/v1/rate-limits']) {
      const nul = await api.admin('GET', `${route}/a%00b`, { tenant: 'acme' });
      expect(nul.status, route).toBe(400);
      expect(nul.body.error.details[0].path, route).toBe('key');
    }
  });
});

describe('concurrency on schedules and replays', () => {
  it("a schedule's occurrences, and a replay, carry the schedule's or the original's concurrency", async () => {
    const concurrency = { key: 'nightly', limit: 1 };
    const put = await api.admin('PUT', '/v1/schedules/every-minute', {
      tenant: 'acme',
      body: { interval: 60, task: 'noop', concurrency },
    });
    expect(put.status).toBe(201);
    expect(put.body.concurrency).toEqual(concurrency);
    const bad = await api.admin('PUT', '/v1/schedules/bad', {
      tenant: 'acme',
      body: { interval: 60, task: 'noop', concurrency: { key: 'x', limit: 0 } },
    });
    expect(bad.status).toBe(400);
    expect(bad.body.error.details.map((d: { path: string }) => d.path)).toEqual(['concurrency.limit']);

    const h = createHarness(t.db);
    const later = new Date(Date.now() + 3 * 60_000);
    await h.sweep({ now: later });
    const rows = await t.db.query<{ concurrency_key: string; concurrency_limit: number; status: string }>(
      `select concurrency_key, concurrency_limit, status from tasks where schedule_id is not null order by id`,
    );
    expect(rows.length).toBeGreaterThanOrEqual(1);
    expect(rows.every((r) => r.concurrency_key === 'nightly' && r.concurrency_limit === 1)).toBe(true);
    // At most one of them holds the key's one slot.
    expect(rows.filter((r) => r.status === 'running').length).toBeLessThanOrEqual(1);

    const done = await api.admin('POST', '/v1/tasks', { tenant: 'acme', body: { task: 'noop', concurrency } });
    await api.admin('DELETE', `/v1/tasks/${done.body.id}`, { tenant: 'acme' });
    const replay = await api.admin('POST', `/v1/tasks/${done.body.id}/replay`, { tenant: 'acme', body: {} });
    expect(replay.status).toBe(201);
    expect(replay.body.concurrency).toEqual(concurrency);
  });
});

describe("a key's limit is its newest task's, whatever created it (slot_limit_of_newest)", () => {
  const T = new Date('2026-12-01T12:00:00Z');
  const running = async () =>
    (await t.db.query<{ n: number }>(`select count(*)::int as n from tasks where concurrency_key = 'k' and status = 'running'`))[0]!.n;
  const limit = async () => (await api.admin('GET', '/v1/concurrency/k', { tenant: 'acme' })).body.limit;

  it("a schedule replaced with a lower limit runs its occurrences at the new one; so does one on a key an enqueue set higher", async () => {
    const h = createHarness(t.db);
    const put = async (limit: number) =>
      (await api.admin('PUT', '/v1/schedules/tick', { tenant: 'acme', body: { task: 'noop', interval: 3, concurrency: { key: 'k', limit } } }))
        .status;
    api.setNow(new Date(T.getTime() + 9_000));
    expect(await put(3)).toBe(201);
    expect((await h.sweep({ now: new Date(T.getTime() + 10_000) })).claimed).toBe(3);
    expect(await limit()).toBe(3);
    // Replaced: the first definition's occurrences are withdrawn, their slots given back.
    api.setNow(new Date(T.getTime() + 11_000));
    expect(await put(1)).toBe(200);
    expect(await running()).toBe(0);
    await h.sweep({ now: new Date(T.getTime() + 12_000) });
    expect(await limit()).toBe(1);
    expect(await running()).toBe(1);

    // An enqueue's limit of 3, then the schedule's occurrences of 1 are newer.
    await api.admin('DELETE', '/v1/schedules/tick', { tenant: 'acme' });
    await resetTables(t.db);
    await h.enqueue({ task: 'noop', concurrency: { key: 'k', limit: 3 } }, { now: T });
    expect(await limit()).toBe(3);
    api.setNow(new Date(T.getTime() + 9_000));
    expect(await put(1)).toBe(201);
    await h.sweep({ now: new Date(T.getTime() + 20_000) });
    expect(await limit()).toBe(1);
    expect(await running()).toBe(1);
  });

  it('a trigger and a replay set the limit they carry', async () => {
    api.setNow(T);
    expect(
      (await api.admin('PUT', '/v1/schedules/daily', { tenant: 'acme', body: { task: 'noop', cron: '0 3 * * *', concurrency: { key: 'k', limit: 2 } } }))
        .status,
    ).toBe(201);
    await createHarness(t.db).enqueue({ task: 'noop', concurrency: { key: 'k', limit: 7 } }, { now: T });
    expect(await limit()).toBe(7);
    expect((await api.admin('POST', '/v1/schedules/daily/trigger', { tenant: 'acme' })).status).toBe(201);
    expect(await limit()).toBe(2);

    const done = await api.admin('POST', '/v1/tasks', { tenant: 'acme', body: { task: 'noop', delay: 3600, concurrency: { key: 'k', limit: 5 } } });
    expect(await limit()).toBe(5);
    await api.admin('DELETE', `/v1/tasks/${done.body.id}`, { tenant: 'acme' });
    await createHarness(t.db).enqueue({ task: 'noop', concurrency: { key: 'k', limit: 9 } }, { now: T });
    expect((await api.admin('POST', `/v1/tasks/${done.body.id}/replay`, { tenant: 'acme', body: {} })).status).toBe(201);
    expect(await limit()).toBe(5);
  });
});

describe('concurrency slots of withdrawn occurrences', () => {
  it('replacing a schedule whose occurrence was claimed early gives the slot back', async () => {
    const T = new Date('2026-12-01T12:00:00Z');
    api.setNow(T);
    const body = { interval: 60, task: 'noop', concurrency: { key: 'sched', limit: 1 } };
    expect((await api.admin('PUT', '/v1/schedules/s', { tenant: 'acme', body })).status).toBe(201);
    const h = createHarness(t.db);
    await h.sweep({ now: new Date(T.getTime() + 30_000) });
    const slot = async () => (await api.admin('GET', '/v1/concurrency/sched', { tenant: 'acme' })).body.running;
    expect(await slot()).toBe(1);
    api.setNow(new Date(T.getTime() + 31_000));
    expect((await api.admin('PUT', '/v1/schedules/s', { tenant: 'acme', body: { ...body, interval: 120 } })).status).toBe(200);
    expect(await slot()).toBe(0);
  });
});

describe('rateLimit option', () => {
  it.each([
    [{ key: '', limit: 5, periodSeconds: 1 }, 'rateLimit.key'],
    [{ key: 'k'.repeat(257), limit: 5, periodSeconds: 1 }, 'rateLimit.key'],
    [{ key: 'k', limit: 0, periodSeconds: 1 }, 'rateLimit.limit'],
    [{ key: 'k', limit: 10_001, periodSeconds: 1 }, 'rateLimit.limit'],
    [{ key: 'k', limit: 1.5, periodSeconds: 1 }, 'rateLimit.limit'],
    [{ key: 'k', limit: 5, periodSeconds: 0 }, 'rateLimit.periodSeconds'],
    [{ key: 'k', limit: 5, periodSeconds: 86_401 }, 'rateLimit.periodSeconds'],
    [{ key: 'k', limit: 5, periodSeconds: 0.5 }, 'rateLimit.periodSeconds'],
    [{ key: 'k', limit: 5 }, 'rateLimit.periodSeconds'],
    [{ key: 'k', limit: 5, periodSeconds: '1' }, 'rateLimit.periodSeconds'],
    [{ key: 'k', limit: 5, periodSeconds: 1, burst: 2 }, 'rateLimit.burst'],
    [{ key: 'k\u0000', limit: 5, periodSeconds: 1 }, 'rateLimit.key'],
    [5, 'rateLimit'],
  ])('refuses %# with a 400 naming %s, storing nothing', async (rateLimit, path) => {
    const r = await api.admin('POST', '/v1/tasks', { body: { task: 'noop', rateLimit } });
    expect(r.status).toBe(400);
    expect(r.body.error.details.map((d: { path: string }) => d.path)).toContain(path);
    const batch = await api.admin('POST', '/v1/tasks/batch', { body: { tasks: [{ task: 'noop' }, { task: 'noop', rateLimit }] } });
    expect(batch.status).toBe(400);
    expect(batch.body.error.details.map((d: { path: string }) => d.path)).toContain(`tasks.1.${path}`);
    const schedule = await api.admin('PUT', '/v1/schedules/s', { body: { interval: 60, task: 'noop', rateLimit } });
    expect(schedule.status).toBe(400);
    expect(schedule.body.error.details.map((d: { path: string }) => d.path)).toContain(path);
    expect(await count()).toBe(0);
    expect((await t.db.query('select 1 from schedules')).length).toBe(0);
  });

  it('accepts the bounds and shows them on the task, the schedule and its occurrences', async () => {
    for (const rateLimit of [
      { key: 'k'.repeat(256), limit: 1, periodSeconds: 1 },
      { key: 'é🙂 /?#', limit: 10_000, periodSeconds: 86_400 },
    ]) {
      const r = await api.admin('POST', '/v1/tasks', { body: { task: 'noop', delay: 60, rateLimit } });
      expect(r.status).toBe(201);
      expect(r.body.rateLimit).toEqual(rateLimit);
      expect((await api.admin('GET', `/v1/tasks/${r.body.id}`)).body.rateLimit).toEqual(rateLimit);
    }
    expect((await api.admin('POST', '/v1/tasks', { body: { task: 'noop', delay: 60 } })).body.rateLimit).toBeNull();
    const rateLimit = { key: 'nightly', limit: 2, periodSeconds: 60 };
    const put = await api.admin('PUT', '/v1/schedules/every-minute', { tenant: 'acme', body: { interval: 60, task: 'noop', rateLimit } });
    expect(put.status).toBe(201);
    expect(put.body.rateLimit).toEqual(rateLimit);
    await createHarness(t.db).sweep({ now: new Date(Date.now() + 3 * 60_000) });
    const occ = await t.db.query<{ rate_key: string; rate_limit: number; rate_period_seconds: number }>(
      `select rate_key, rate_limit, rate_period_seconds from tasks where schedule_id is not null`,
    );
    expect(occ.length).toBeGreaterThanOrEqual(1);
    expect(occ.every((o) => o.rate_key === 'nightly' && o.rate_limit === 2 && o.rate_period_seconds === 60)).toBe(true);
  });

  it("GET /v1/rate-limits/{key} shows the tenant's limit, next allowed start and waiting tasks; 404 for an unknown key or another tenant's", async () => {
    const T = new Date('2026-12-01T12:00:00Z');
    api.setNow(T);
    const h = createHarness(t.db);
    const rateLimit = { key: 'partner/eu', limit: 2, periodSeconds: 10 };
    await h.enqueue(
      [
        ...Array.from({ length: 4 }, () => ({ task: 'noop', rateLimit })),
        // Due in an hour: waiting (scheduled), not on the line yet.
        { task: 'noop', rateLimit, runAt: new Date(T.getTime() + 3_600_000) },
      ],
      { now: T },
    );
    expect((await api.admin('GET', '/v1/rate-limits/partner%2Feu', { tenant: 'acme' })).status).toBe(404);
    await h.sweep({ now: T });
    // Claimed (reserved on the line) but not started: still waiting, as is the later one.
    const claimed = await api.admin('GET', `/v1/rate-limits/${encodeURIComponent('partner/eu')}`, { tenant: 'acme' });
    expect(await t.db.query(`select 1 from tasks where status = 'running' and started_at is null`)).toHaveLength(4);
    expect(claimed.body.waiting).toBe(5);
    await h.deliver(h.outbox.take(), { now: T });
    const r = await api.admin('GET', `/v1/rate-limits/${encodeURIComponent('partner/eu')}`, { tenant: 'acme' });
    expect(r.status).toBe(200);
    // Starts at T, T+5, T+10, T+15 s: the next one may start at T+20 s.
    expect(r.body).toEqual({ key: 'partner/eu', limit: 2, periodSeconds: 10, nextStartAt: '2026-12-01T12:00:20.000Z', waiting: 1 });
    expect((await api.admin('GET', '/v1/rate-limits/partner%2Feu', { tenant: 'other' })).status).toBe(404);
    expect((await api.call('GET', '/v1/rate-limits/nope')).status).toBe(401);
    expect((await api.admin('GET', `/v1/rate-limits/${'k'.repeat(257)}`, { tenant: 'acme' })).status).toBe(400);
    api.setNow(new Date(T.getTime() + 60_000));
    expect((await api.admin('GET', '/v1/rate-limits/partner%2Feu', { tenant: 'acme' })).body.nextStartAt).toBeNull();
  });
});
