// /v1/schedules over the real app and database.
import { beforeEach, describe, expect, it } from 'vitest';
import { T0, useTestDatabase, resetTables } from '../helpers/db.ts';
import { createHarness } from '../helpers/harness.ts';
import { createTestApi } from '../helpers/http.ts';
import { latch } from '../helpers/faults.ts';
import { defineTask } from '../../src/handlers/registry.ts';
import { z } from 'zod';

const t = useTestDatabase();
let api: ReturnType<typeof createTestApi>;
const as = (tenant: string) => ({ tenant });

beforeEach(async () => {
  await resetTables(t.db);
  api = createTestApi(t.db);
  api.setNow(T0);
});

describe('PUT /v1/schedules/:name', () => {
  it('creates (201), then replaces idempotently (200), with defaults filled in', async () => {
    const body = { cron: '0 9 * * MON', timezone: 'Europe/Paris', task: 'noop', payload: { report: 'weekly' } };
    const a = await api.admin('PUT', '/v1/schedules/weekly', { ...as('acme'), body });
    expect(a.status).toBe(201);
    expect(a.body).toMatchObject({
      name: 'weekly',
      kind: 'cron',
      cron: '0 9 * * MON',
      timezone: 'Europe/Paris',
      queue: 'default',
      maxAttempts: 5,
      misfire: 'run_once',
      misfireGrace: 60,
      catchUpLimit: 100,
      overlap: 'allow',
      enabled: true,
      // Monday 2026-12-07 09:00 in Paris (UTC+1).
      nextRunAt: '2026-12-07T08:00:00.000Z',
      lastFiredAt: null,
    });
    const b = await api.admin('PUT', '/v1/schedules/weekly', { ...as('acme'), body });
    expect(b.status).toBe(200);
    expect({ ...b.body, updatedAt: a.body.updatedAt }).toEqual(a.body);
    const count = await t.db.query<{ n: number }>('select count(*)::int as n from schedules');
    expect(count[0]!.n).toBe(1);
  });

  it('a replacement while a fire time is due and not yet materialized: the same timing keeps it, a new timing starts from now', async () => {
    const h = createHarness(t.db);
    const fired = async (name: string) =>
      (
        await t.db.query<{ at: Date }>(
          `select t.scheduled_for as at from tasks t join schedules s on s.id = t.schedule_id where s.name = $1 order by 1`,
          [name],
        )
      ).map((r) => r.at.toISOString());
    for (const [name, timing] of [
      ['c', { cron: '*/5 * * * *' }],
      ['i', { interval: 300 }],
      ['r', { recurrence: { every: 5, unit: 'minutes', start: T0.toISOString() } }],
    ] as const) {
      api.setNow(new Date(T0.getTime() - ('interval' in timing ? 300_000 : 290_000))); // the first fire is T0
      expect((await api.admin('PUT', `/v1/schedules/${name}`, { ...as('acme'), body: { task: 'noop', ...timing } })).body.nextRunAt).toBe(
        T0.toISOString(),
      );
      // 20 s past T0 and no sweep since: the client retries its PUT, with a new payload.
      api.setNow(new Date(T0.getTime() + 20_000));
      const again = await api.admin('PUT', `/v1/schedules/${name}`, { ...as('acme'), body: { task: 'noop', payload: { v: 2 }, ...timing } });
      expect(again.body.nextRunAt, name).toBe(T0.toISOString());
      await h.sweep({ now: new Date(T0.getTime() + 25_000) });
      expect(await fired(name), name).toEqual([T0.toISOString()]);
      const [occurrence] = await t.db.query<{ payload: unknown }>(
        `select t.payload from tasks t join schedules s on s.id = t.schedule_id where s.name = $1`,
        [name],
      );
      expect(occurrence!.payload).toEqual({ v: 2 });
    }
    // A new timing while its old fire is due: the old fire time is not kept.
    api.setNow(new Date(T0.getTime() - 290_000));
    await api.admin('PUT', '/v1/schedules/n', { ...as('acme'), body: { task: 'noop', cron: '*/5 * * * *' } });
    api.setNow(new Date(T0.getTime() + 20_000));
    const moved = await api.admin('PUT', '/v1/schedules/n', { ...as('acme'), body: { task: 'noop', cron: '*/7 * * * *' } });
    expect(moved.body.nextRunAt).toBe('2026-12-01T12:07:00.000Z');
  });

  it('answers 400 naming the field for invalid specs, and stores nothing', async () => {
    const cases: [Record<string, unknown>, string][] = [
      [{ cron: 'every monday' }, 'cron'],
      [{ cron: '61 * * * *' }, 'cron'],
      [{ cron: '* * * * *', timezone: 'Mars/Olympus_Mons' }, 'timezone'],
      [{ interval: 0 }, 'interval'],
      [{ interval: -5 }, 'interval'],
      [{ interval: 1.5 }, 'interval'],
      [{ cron: '* * * * *', interval: 60 }, 'interval'],
      [{}, 'cron'],
      [{ interval: 60, timezone: 'UTC' }, 'timezone'],
      [{ recurrence: { every: 0, unit: 'days', start: '2026-12-01T09:00:00Z' } }, 'recurrence.every'],
      [{ recurrence: { every: 1, unit: 'fortnights', start: '2026-12-01T09:00:00Z' } }, 'recurrence.unit'],
      [{ recurrence: { every: 1, unit: 'days', start: 'soon' } }, 'recurrence.start'],
      [{ at: 'tomorrow' }, 'at'],
      [{ cron: '* * * * *', misfire: 'sometimes' }, 'misfire'],
      [{ cron: '* * * * *', overlap: 'maybe' }, 'overlap'],
      [{ cron: '* * * * *', catchUpLimit: 0 }, 'catchUpLimit'],
      [{ cron: '* * * * *', task: 'nope' }, 'task'],
      [{ cron: '* * * * *', task: 'http', payload: { url: 'http://127.0.0.1/' } }, 'payload.url'],
      [{ cron: '* * * * *', surprise: true }, 'surprise'],
    ];
    for (const [body, field] of cases) {
      const r = await api.admin('PUT', '/v1/schedules/bad', { ...as('acme'), body: { task: 'noop', ...body } });
      expect(r.status, JSON.stringify(body)).toBe(400);
      expect(r.body.error.details.map((d: { path: string }) => d.path), JSON.stringify(body)).toContain(field);
    }
    const bad = await api.admin('PUT', '/v1/schedules/has%20space', { ...as('acme'), body: { task: 'noop', interval: 60 } });
    expect(bad.status).toBe(400);
    expect(bad.body.error.details[0].path).toBe('name');
    const count = await t.db.query<{ n: number }>('select count(*)::int as n from schedules');
    expect(count[0]!.n).toBe(0);
  });
});

describe('reading and managing schedules', () => {
  it('lists by name with a cursor, gets, pauses, resumes, previews and deletes', async () => {
    for (const name of ['c', 'a', 'b']) await api.admin('PUT', `/v1/schedules/${name}`, { ...as('acme'), body: { task: 'noop', interval: 3600 } });
    const p1 = await api.admin('GET', '/v1/schedules?limit=2', as('acme'));
    expect(p1.body.schedules.map((s: { name: string }) => s.name)).toEqual(['a', 'b']);
    const p2 = await api.admin('GET', `/v1/schedules?limit=2&cursor=${p1.body.nextCursor}`, as('acme'));
    expect(p2.body).toMatchObject({ schedules: [{ name: 'c' }], nextCursor: null });
    // A forged cursor, or another listing's, is refused naming the field.
    const taskCursor = btoa('id:42');
    for (const path of ['/v1/schedules?cursor=bm9wZQ', `/v1/schedules?cursor=${taskCursor}`, `/v1/schedules/a/runs?cursor=${taskCursor}`]) {
      const r = await api.admin('GET', path, as('acme'));
      expect(r.status, path).toBe(400);
      expect(r.body.error.details[0].path, path).toBe('cursor');
    }

    expect((await api.admin('POST', '/v1/schedules/a/pause', as('acme'))).body.enabled).toBe(false);
    expect((await api.admin('POST', '/v1/schedules/a/resume', as('acme'))).body.enabled).toBe(true);
    const next = await api.admin('GET', '/v1/schedules/a/next?count=3', as('acme'));
    expect(next.body.times).toEqual(['2026-12-01T13:00:00.000Z', '2026-12-01T14:00:00.000Z', '2026-12-01T15:00:00.000Z']);
    expect((await api.admin('GET', '/v1/schedules/a/next?count=101', as('acme'))).status).toBe(400);

    const del = await api.admin('DELETE', '/v1/schedules/b', as('acme'));
    expect(del.status).toBe(200);
    expect((await api.admin('GET', '/v1/schedules/b', as('acme'))).status).toBe(404);
    expect((await api.admin('DELETE', '/v1/schedules/b', as('acme'))).status).toBe(404);
  });

  it('runs: occurrences newest first with their status, paged', async () => {
    await api.admin('PUT', '/v1/schedules/tick', { ...as('acme'), body: { task: 'noop', interval: 60 } });
    const h = createHarness(t.db);
    for (let i = 1; i <= 5; i++) await h.drain({ now: new Date(T0.getTime() + i * 60_000) });
    const r1 = await api.admin('GET', '/v1/schedules/tick/runs?limit=4', as('acme'));
    expect(r1.status).toBe(200);
    expect(r1.body.tasks.map((x: { scheduledFor: string }) => x.scheduledFor)).toEqual([
      '2026-12-01T12:06:00.000Z',
      '2026-12-01T12:05:00.000Z',
      '2026-12-01T12:04:00.000Z',
      '2026-12-01T12:03:00.000Z',
    ]);
    const r2 = await api.admin('GET', `/v1/schedules/tick/runs?limit=4&cursor=${r1.body.nextCursor}`, as('acme'));
    expect(r2.body.tasks.map((x: { scheduledFor: string }) => x.scheduledFor)).toEqual([
      '2026-12-01T12:02:00.000Z',
      '2026-12-01T12:01:00.000Z',
    ]);
    expect(r2.body.nextCursor).toBeNull();
    const done = await api.admin('GET', '/v1/schedules/tick/runs?status=succeeded', as('acme'));
    expect(done.body.tasks.length).toBeGreaterThanOrEqual(5);
  });

  it('deleting a schedule leaves its running occurrence to finish', async () => {
    const running = latch();
    const release = latch();
    const hold = defineTask('hold', z.object({}).default({}), async () => {
      running.open();
      await release.wait;
    });
    api = createTestApi(t.db, { handlers: [hold] });
    api.setNow(T0);
    await api.admin('PUT', '/v1/schedules/long', { ...as('acme'), body: { task: 'hold', interval: 60 } });
    const h = createHarness(t.db, { handlers: [hold] });
    await h.sweep({ now: new Date(T0.getTime() + 60_000) });
    // 12:01 runs; 12:02 was claimed early by the look-ahead and has not started.
    const [first, second] = h.outbox.take();
    const consumed = h.consume([first!.body], { now: new Date(T0.getTime() + 60_000) });
    await running.wait;
    expect((await api.admin('DELETE', '/v1/schedules/long', as('acme'))).status).toBe(200);
    release.open();
    expect((await consumed).results).toEqual([{ id: first!.body.id, outcome: 'succeeded', status: 'succeeded' }]);
    expect((await h.consume([second!.body], { now: new Date(T0.getTime() + 120_000) })).results).toEqual([]);
    const rows = await t.db.query<{ id: string; status: string }>('select id, status from tasks order by id');
    expect(rows.map((r) => [String(r.id), r.status])).toEqual([
      [first!.body.id, 'succeeded'],
      [second!.body.id, 'cancelled'],
    ]);
  });

  it('pausing a schedule while an occurrence runs: that attempt finishes and, failing, its retries still run until the task is cancelled', async () => {
    let runs = 0;
    const flaky = defineTask('flaky', z.object({}).default({}), async () => {
      runs += 1;
      throw new Error('boom');
    });
    api = createTestApi(t.db, { handlers: [flaky] });
    api.setNow(new Date(T0.getTime() - 30_000));
    await api.admin('PUT', '/v1/schedules/once', { ...as('acme'), body: { task: 'flaky', at: T0.toISOString(), maxAttempts: 5, backoff: { base: 1, max: 1 } } });
    const h = createHarness(t.db, { handlers: [flaky] });
    await h.sweep({ now: T0 });
    const sent = h.outbox.take();
    await h.consume(
      sent.map((m) => m.body),
      {
        now: T0,
        faults: async (point) => {
          // The handler has started: the schedule is paused now.
          if (point === 'consume.after_start') expect((await api.admin('POST', '/v1/schedules/once/pause', as('acme'))).status).toBe(200);
        },
      },
    );
    expect(runs).toBe(1);
    await h.sweep({ now: new Date(T0.getTime() + 2_000) });
    await h.consume(h.outbox.take().map((m) => m.body), { now: new Date(T0.getTime() + 2_000) });
    expect(runs).toBe(2);
    const id = sent[0]!.body.id;
    expect((await api.admin('DELETE', `/v1/tasks/${id}`, as('acme'))).status).toBe(200);
    await h.drain({ now: new Date(T0.getTime() + 60_000) });
    expect(runs).toBe(2);
    expect((await api.admin('GET', `/v1/tasks/${id}`, as('acme'))).body).toMatchObject({ status: 'cancelled', attempts: 2 });
  });

  it('deleting a schedule cancels its occurrences that have not started', async () => {
    await api.admin('PUT', '/v1/schedules/soon', { ...as('acme'), body: { task: 'noop', interval: 60 } });
    const h = createHarness(t.db);
    await h.sweep({ now: new Date(T0.getTime() + 30_000) }); // 12:01 materialized and dispatched with a delay
    const [m] = h.outbox.take();
    expect((await api.admin('DELETE', '/v1/schedules/soon', as('acme'))).status).toBe(200);
    const out = await h.consume([m!.body], { now: new Date(T0.getTime() + 60_000) });
    expect(out.results).toEqual([]);
    // Cancelled, and kept as history of the schedule that made it.
    const rows = await t.db.query<{ status: string; schedule_id: string | null }>('select status, schedule_id from tasks');
    expect(rows).toEqual([{ status: 'cancelled', schedule_id: '1' }]);
  });
});
