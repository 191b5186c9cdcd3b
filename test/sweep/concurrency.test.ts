// Overlapping sweeps (two cron ticks, a manual tick, the HTTP kick) must
// split the work, never duplicate it: SKIP LOCKED and the fenced marks.
import { beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { Db } from '../../src/db/seam.ts';
import { at, resetTables, T0, useTestDatabase } from '../helpers/db.ts';
import { latch } from '../helpers/faults.ts';
import { createHarness } from '../helpers/harness.ts';
import { createTestApi } from '../helpers/http.ts';

const t = useTestDatabase();
let other: Db;
beforeAll(async () => {
  other = await t.open();
});

describe('concurrent sweeps', () => {
  it('two sweeps at the same moment over 1,000 due tasks dispatch every task exactly once', async () => {
    const now = new Date('2026-12-01T12:00:00Z');
    const a = createHarness(t.db, { config: { sweepBatchSize: 50 } });
    const b = createHarness(other, { config: { sweepBatchSize: 50 } });
    // Scheduled in the past, so both sweeps also race on promotion.
    const inputs = Array.from({ length: 1000 }, (_, i) => ({ task: 'noop', payload: { i }, runAt: new Date(now.getTime() - 60_000 + i) }));
    await a.enqueue(inputs, { now: new Date(now.getTime() - 3_600_000) });

    const [ca, cb] = await Promise.all([a.sweep({ now, workerId: 'sweep-a' }), b.sweep({ now, workerId: 'sweep-b' })]);
    expect(ca.promoted + cb.promoted).toBe(1000);
    expect(ca.claimed + cb.claimed).toBe(1000);
    expect(ca.dispatched + cb.dispatched).toBe(1000);
    expect(ca.lost + cb.lost).toBe(0);

    const sent = [...a.outbox.take(), ...b.outbox.take()].map((m) => m.body.id);
    expect(sent).toHaveLength(1000);
    expect(new Set(sent).size).toBe(1000);

    const rows = await t.db.query<{ status: string; lease_epoch: string; n: number; dispatched: number }>(
      `select t.status, t.lease_epoch, count(*)::int as n, count(d.claim_token)::int as dispatched
       from tasks t left join dispatch_marks d on d.claim_token = t.claim_token group by t.status, t.lease_epoch`,
    );
    expect(rows).toEqual([{ status: 'running', lease_epoch: '1', n: 1000, dispatched: 1000 }]);
    // The append-only log shows one claim per task.
    const claims = await t.db.query<{ n: number }>(
      `select count(*)::int as n from task_events where from_status = 'queued' and to_status = 'running'`,
    );
    expect(claims[0]!.n).toBe(1000);
  });

  it('sweeps and consumers over the same tasks never deadlock: the dispatch mark writes no task row', async () => {
    // Each batch is started by a consumer, in reverse order, while its sweep
    // writes the dispatch mark: the interleaving that deadlocked when the mark
    // updated every task of the batch (issue 12).
    const now = new Date('2026-12-01T12:00:00Z');
    const consumers = await t.open({ maxConnections: 4 });
    const c = createHarness(consumers, { config: { sweepBatchSize: 50 } });
    const inFlight: Promise<unknown>[] = [];
    const errors: unknown[] = [];
    const sender = {
      async sendBatch(messages: Iterable<{ body: { id: string; epoch: number; runAt: number } }>) {
        const bodies = [...messages].map((m) => m.body).reverse();
        inFlight.push(c.consume(bodies, { now }).catch((error: unknown) => errors.push(error)));
      },
    };
    // A budget no loaded machine runs out of: the test is about locks, not time.
    const a = createHarness(t.db, { config: { sweepBatchSize: 50, sweepTimeBudgetMs: 300_000 } });
    const b = createHarness(other, { config: { sweepBatchSize: 50, sweepTimeBudgetMs: 300_000 } });
    const n = 2000;
    await a.enqueue(Array.from({ length: n }, (_, i) => ({ task: 'noop', payload: { i } })), { now, tenant: 'interleaved' });
    const [ca, cb] = await Promise.all([
      a.sweep({ now, workerId: 'sweep-a', sender }),
      b.sweep({ now, workerId: 'sweep-b', sender }),
    ]);
    await Promise.all(inFlight);
    expect(errors).toEqual([]);
    expect(ca.dispatched + cb.dispatched).toBe(n);
    const lines = [...a.logs, ...b.logs, ...c.logs].filter((l) => /deadlock/i.test(JSON.stringify(l)));
    expect(lines).toEqual([]);
    const rows = await t.db.query<{ status: string; n: number; marked: number }>(
      `select t.status, count(*)::int as n, count(d.claim_token)::int as marked
       from tasks t left join dispatch_marks d on d.claim_token = t.claim_token
       where t.tenant = 'interleaved' group by t.status`,
    );
    expect(rows).toEqual([{ status: 'succeeded', n, marked: n }]);
    const starts = await t.db.query<{ n: number }>(`select count(*)::int as n from task_events e join tasks t on t.id = e.task_id
       where t.tenant = 'interleaved' and e.to_status = 'succeeded'`);
    expect(starts[0]!.n).toBe(n);
    await consumers.close();
  });
});

// A sweep that finds another sweep's rows locked takes other rows at once:
// every batch lock is SKIP LOCKED. The second sweep's sessions run with a
// short lock_timeout, so waiting on the held rows fails the test instead of
// hanging it.
describe('a second sweep that finds the first one’s rows locked', () => {
  let second: Db;
  beforeAll(async () => {
    await t.db.query(`alter database ${t.name} set lock_timeout = '3s'`);
    second = await t.open({ maxConnections: 2 }); // new sessions: they take the setting
  });
  beforeEach(async () => {
    await resetTables(t.db);
  });

  /** Locks the rows `select` returns in a transaction of `other` until the returned release() is called. */
  async function holdLocked(select: string): Promise<{ ids: string[]; release(): Promise<void> }> {
    const locked = latch();
    const done = latch();
    let ids: string[] = [];
    const tx = other.transaction(async (q) => {
      ids = (await q.query<{ id: string }>(select)).map((r) => String(r.id));
      locked.open();
      await done.wait;
    });
    await locked.wait;
    return {
      ids,
      async release() {
        done.open();
        await tx;
      },
    };
  }

  it('claim: moves on to the runnable tasks nobody holds', async () => {
    const a = createHarness(t.db);
    await a.enqueue(Array.from({ length: 10 }, () => ({ task: 'noop' })), { now: T0 });
    const held = await holdLocked(`select id from tasks where status = 'queued' order by vtime, id limit 4 for update`);
    try {
      const counts = await createHarness(second).sweep({ now: T0 });
      expect(counts).toMatchObject({ claimed: 6, dispatched: 6 });
      const rows = await t.db.query<{ id: string; status: string }>(`select id, status from tasks where status = 'queued' order by id`);
      expect(rows.map((r) => String(r.id))).toEqual(held.ids);
    } finally {
      await held.release();
    }
  });

  it('promote: moves on to the due tasks nobody holds', async () => {
    const a = createHarness(t.db);
    await a.enqueue(Array.from({ length: 10 }, () => ({ task: 'noop', delay: 3600 })), { now: T0 });
    const held = await holdLocked(`select id from tasks where status = 'scheduled' order by run_at, id limit 4 for update`);
    try {
      const counts = await createHarness(second).sweep({ now: at(3600) });
      expect(counts).toMatchObject({ promoted: 6, claimed: 6 });
    } finally {
      await held.release();
    }
  });

  it('reap: moves on to the expired leases nobody holds', async () => {
    const a = createHarness(t.db);
    await a.enqueue(Array.from({ length: 10 }, () => ({ task: 'noop' })), { now: T0 });
    await a.sweep({ now: T0 }); // sent, never reported
    const held = await holdLocked(`select id from tasks where status = 'running' order by id limit 4 for update`);
    try {
      const counts = await createHarness(second, { config: { lookaheadSeconds: 0 } }).sweep({ now: at(3600) });
      expect(counts.reaped).toEqual({ requeued: 0, retried: 6, dead: 0 });
      const running = await t.db.query<{ id: string }>(`select id from tasks where status = 'running' and lease_epoch = 1 order by id`);
      expect(running.map((r) => String(r.id))).toEqual(held.ids);
    } finally {
      await held.release();
    }
  });

  it('purge: moves on to the finished tasks nobody holds', async () => {
    const a = createHarness(t.db);
    await a.enqueue(Array.from({ length: 10 }, () => ({ task: 'noop' })), { now: T0 });
    await a.drain({ now: T0 });
    const held = await holdLocked(`select id from tasks where status = 'succeeded' order by id limit 4 for update`);
    try {
      const counts = await createHarness(second).sweep({ now: at(30 * 86_400) });
      expect(counts.purged).toBe(6);
    } finally {
      await held.release();
    }
    const left = await t.db.query<{ id: string }>(`select id from tasks order by id`);
    expect(left.map((r) => String(r.id))).toEqual(held.ids);
  });

  it('schedule lock: moves on to the due schedules nobody holds', async () => {
    const api = createTestApi(t.db);
    api.setNow(T0);
    for (let i = 0; i < 6; i++) {
      const r = await api.admin('PUT', `/v1/schedules/s${i}`, { tenant: 'acme', body: { task: 'noop', at: at(600).toISOString() } });
      expect(r.status).toBe(201);
    }
    const held = await holdLocked(`select id from schedules order by id limit 2 for update`);
    try {
      const counts = await createHarness(second).sweep({ now: at(600) });
      expect(counts.materialized).toMatchObject({ schedules: 4, fired: 4 });
    } finally {
      await held.release();
    }
  });
});
