// Materialization over a real database: each fire time becomes one task,
// once, however many sweeps overlap; misfire and overlap policies; edits
// change future occurrences only; occurrences run through the lifecycle.
import { beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { Db } from '../../src/db/seam.ts';
import { useTestDatabase, resetTables, T0, at } from '../helpers/db.ts';
import { createHarness, type Harness } from '../helpers/harness.ts';
import { createTestApi } from '../helpers/http.ts';

const t = useTestDatabase();
let h: Harness;
let api: ReturnType<typeof createTestApi>;
let others: Db[] = [];

beforeAll(async () => {
  others = await Promise.all(Array.from({ length: 3 }, () => t.open({ maxConnections: 3 })));
});
beforeEach(async () => {
  await resetTables(t.db);
  h = createHarness(t.db);
  api = createTestApi(t.db);
  api.setNow(T0);
});

const put = async (name: string, body: Record<string, unknown>) => {
  const r = await api.admin('PUT', `/v1/schedules/${name}`, { tenant: 'acme', body: { task: 'noop', ...body } });
  expect(r.status, JSON.stringify(r.body)).toBeLessThan(300);
  return r.body;
};
const occurrences = (name: string) =>
  t.db.query<{ scheduled_for: Date; status: string; payload: unknown }>(
    `select t.scheduled_for, t.status, t.payload from tasks t join schedules s on s.id = t.schedule_id
     where s.name = $1 order by t.scheduled_for`,
    [name],
  );

describe('materialization', () => {
  it('turns each fire time into one task, claimed early and sent with a delay', async () => {
    api.setNow(at(10)); // created at 12:00:10: the first fire is 12:01
    await put('every-minute', { cron: '* * * * *' });
    const counts = await h.sweep({ now: at(30) });
    // 12:01:00 is within the 60 s look-ahead from 12:00:30.
    expect(counts.materialized).toEqual({ schedules: 1, fired: 1, missed: 0 });
    expect(counts.claimed).toBe(1);
    const [m] = h.outbox.take();
    expect(m!.delaySeconds).toBe(29); // 30 s, less the Queue's 1 s batch timeout
    const again = await h.sweep({ now: at(31) });
    expect(again.materialized.fired).toBe(0);
    expect((await occurrences('every-minute')).map((o) => o.scheduled_for.toISOString())).toEqual(['2026-12-01T12:01:00.000Z']);
  });

  it('concurrent sweeps over the same due schedules write each occurrence once', async () => {
    for (let i = 0; i < 50; i++) await put(`s${i}`, { cron: '*/5 * * * *' });
    const sweepers = [h, ...others.map((db) => createHarness(db, { config: { scheduleBatchSize: 7 } }))];
    // Every sweep at 12:30 sees 12:05 ... 12:30 as due (within grace via catch_up).
    await api.admin('GET', '/v1/schedules', { tenant: 'acme' });
    await t.db.query(`update schedules set misfire = 'catch_up', misfire_grace_seconds = 3600`);
    const results = await Promise.all(sweepers.map((s) => s.sweep({ now: at(30 * 60) })));
    const fired = results.reduce((n, r) => n + r.materialized.fired, 0);
    expect(fired).toBe(50 * 7); // 12:05, :10, :15, :20, :25, :30 and :35 (look-ahead) per schedule
    const dup = await t.db.query(`select schedule_id, scheduled_for from tasks group by 1, 2 having count(*) > 1`);
    expect(dup).toEqual([]);
  });

  it('a replaced schedule changes future occurrences only, including those the look-ahead planned', async () => {
    await put('report', { interval: 60, payload: { v: 1 } });
    await h.sweep({ now: at(60) }); // 12:01 is due; 12:02 is planned (and claimed) by the look-ahead
    api.setNow(at(60));
    await put('report', { interval: 60, payload: { v: 2 } });
    await h.sweep({ now: at(120) });
    const occ = await occurrences('report');
    // 12:01 was due before the edit and keeps its snapshot; 12:02 follows the new definition.
    expect(occ.map((o) => o.payload)).toEqual([{ v: 1 }, { v: 2 }, { v: 2 }]);
    // The interval kept its rhythm (anchored at creation, 12:00).
    expect(occ.map((o) => o.scheduled_for.toISOString())).toEqual([
      '2026-12-01T12:01:00.000Z',
      '2026-12-01T12:02:00.000Z',
      '2026-12-01T12:03:00.000Z',
    ]);
  });

  it('occurrences run through the lifecycle to succeeded, and a one-shot fires once', async () => {
    await put('once', { at: at(90).toISOString() });
    await h.drain({ now: at(60) });
    await h.drain({ now: at(3600) });
    const occ = await occurrences('once');
    expect(occ.map((o) => [o.scheduled_for.toISOString(), o.status])).toEqual([[at(90).toISOString(), 'succeeded']]);
    const s = await api.admin('GET', '/v1/schedules/once', { tenant: 'acme' });
    expect(s.body).toMatchObject({ nextRunAt: null, lastFiredAt: at(90).toISOString() });
  });
});

describe('misfire policies after a 3-hour outage', () => {
  // Every minute, from 12:00; the service comes back at 15:00:30.
  const back = at(3 * 3600 + 30);
  async function outage(misfire: string) {
    await put(`m-${misfire}`, { cron: '* * * * *', misfire, catchUpLimit: 100 });
    const counts = await h.sweep({ now: back });
    const occ = await occurrences(`m-${misfire}`);
    const late = occ.filter((o) => o.scheduled_for < at(3 * 3600 - 30));
    const onTime = occ.filter((o) => o.scheduled_for >= at(3 * 3600 - 30));
    return { counts, occ, late, onTime };
  }

  it('run_once: one occurrence for the latest missed time, plus the on-time ones', async () => {
    const { late, onTime } = await outage('run_once');
    expect(late.map((o) => o.scheduled_for.toISOString())).toEqual(['2026-12-01T14:59:00.000Z']);
    expect(late[0]!.status).not.toBe('missed');
    // 15:00 (30 s late: within the 60 s grace) and 15:01 (look-ahead).
    expect(onTime.map((o) => o.scheduled_for.toISOString())).toEqual(['2026-12-01T15:00:00.000Z', '2026-12-01T15:01:00.000Z']);
  });

  it('catch_up: the latest catchUpLimit missed times fire', async () => {
    const { late, onTime } = await outage('catch_up');
    expect(late).toHaveLength(100);
    expect(late[0]!.scheduled_for.toISOString()).toBe('2026-12-01T13:20:00.000Z');
    expect(late.at(-1)!.scheduled_for.toISOString()).toBe('2026-12-01T14:59:00.000Z');
    expect(onTime).toHaveLength(2);
  });

  it('skip: the latest catchUpLimit missed times are recorded as missed, none fires', async () => {
    const { late, onTime, counts } = await outage('skip');
    expect(late).toHaveLength(100);
    expect(late.every((o) => o.status === 'missed')).toBe(true);
    expect(counts.materialized).toMatchObject({ missed: 100, fired: 2 });
    expect(onTime.every((o) => o.status !== 'missed')).toBe(true);
  });

  it('pause and resume: the misfire policy applies, never a flood', async () => {
    await put('paused', { interval: 60 });
    // An enabled schedule due beside it, so the sweep's probe finds work and
    // the paused one is left out by the materialization itself.
    await put('awake', { interval: 60 });
    await api.admin('POST', '/v1/schedules/paused/pause', { tenant: 'acme' });
    expect((await h.sweep({ now: at(3600) })).materialized.schedules).toBe(1);
    expect(await occurrences('paused')).toEqual([]);
    expect((await occurrences('awake')).length).toBeGreaterThan(0);
    await api.admin('POST', '/v1/schedules/paused/resume', { tenant: 'acme' });
    await h.sweep({ now: at(3600 + 10) });
    const occ = await occurrences('paused');
    // run_once: 12:59 (the latest late time), 13:00 (on time) and 13:01 (look-ahead).
    expect(occ.map((o) => o.scheduled_for.toISOString())).toEqual([
      '2026-12-01T12:59:00.000Z',
      '2026-12-01T13:00:00.000Z',
      '2026-12-01T13:01:00.000Z',
    ]);
  });
});

describe('one occurrence per fire time', () => {
  it('a one-shot replaced after its time was materialized does not fire a second time', async () => {
    await put('once', { at: at(60).toISOString() });
    await h.sweep({ now: at(60) }); // 12:01 fires and is sent; its consumer has not run yet
    api.setNow(at(61));
    await put('once', { at: at(60).toISOString(), payload: { again: true } }); // the same time, replaced after it
    await h.sweep({ now: at(61) });
    await h.sweep({ now: at(120) });
    expect((await occurrences('once')).map((o) => o.scheduled_for.toISOString())).toEqual(['2026-12-01T12:01:00.000Z']);
  });
});

describe('overlap policy', () => {
  it('skip: no new occurrence while the previous one has not finished; the time is recorded as missed', async () => {
    await put('solo', { interval: 60, overlap: 'skip' });
    await h.sweep({ now: at(60) }); // 12:01 fires, claimed, never finishes
    h.outbox.take();
    await h.sweep({ now: at(120) }); // 12:02: the 12:01 run is still running
    const occ = await occurrences('solo');
    expect(occ.map((o) => [o.scheduled_for.toISOString(), o.status])).toEqual([
      ['2026-12-01T12:01:00.000Z', 'running'],
      ['2026-12-01T12:02:00.000Z', 'missed'],
    ]);
  });

  it('skip: the next time is judged when it is due, not when the look-ahead first sees it', async () => {
    await put('solo', { interval: 60, overlap: 'skip' });
    await h.sweep({ now: at(60) }); // 12:01 fires and is handed to a consumer
    const [m] = h.outbox.take();
    // 12:01:30: the 12:01 run is still going, and 12:02 is already within the look-ahead.
    expect((await h.sweep({ now: at(90) })).materialized).toEqual({ schedules: 0, fired: 0, missed: 0 });
    expect((await h.consume([m!.body], { now: at(100) })).results).toEqual([{ id: m!.body.id, outcome: 'succeeded', status: 'succeeded' }]);
    await h.sweep({ now: at(120) }); // 12:02: the previous run finished in time
    const occ = await occurrences('solo');
    expect(occ.map((o) => [o.scheduled_for.toISOString(), o.status])).toEqual([
      ['2026-12-01T12:01:00.000Z', 'succeeded'],
      ['2026-12-01T12:02:00.000Z', 'running'],
    ]);
  });
});

describe('scale', () => {
  it('10,000 schedules due in the same minute all fire within that tick or the next, each once', async () => {
    await t.db.query(
      `insert into schedules (tenant, name, kind, cron, task, next_run_at, options)
       select 'bulk', 'bulk-' || g, 'cron', '0 * * * *', 'noop', $1::timestamptz,
              '{"backoffBaseMs":1000,"backoffMaxMs":60000,"timeoutMs":30000,"delivery":"at_least_once"}'
       from generate_series(1, 10000) g`,
      [at(3600)],
    );
    const first = await h.sweep({ now: at(3600 + 5) });
    const second = first.materialized.schedules < 10_000 ? await h.sweep({ now: at(3600 + 65) }) : undefined;
    const fired = first.materialized.fired + (second?.materialized.fired ?? 0);
    expect(fired).toBe(10_000);
    const rows = await t.db.query<{ n: number; d: number }>(
      `select count(*)::int as n, count(distinct schedule_id)::int as d from tasks where scheduled_for = $1`,
      [at(3600)],
    );
    expect(rows[0]).toEqual({ n: 10_000, d: 10_000 });
    const next = await t.db.query<{ n: number }>(`select count(*)::int as n from schedules where next_run_at = $1`, [at(7200)]);
    expect(next[0]!.n).toBe(10_000);
  }, 120_000);
});
