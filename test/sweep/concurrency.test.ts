// Overlapping sweeps (two cron ticks, a manual tick, the HTTP kick) must
// split the work, never duplicate it: SKIP LOCKED and the fenced marks.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Db } from '../../src/db/seam.ts';
import { useTestDatabase } from '../helpers/db.ts';
import { createHarness } from '../helpers/harness.ts';

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
    const a = createHarness(t.db, { config: { sweepBatchSize: 50 } });
    const b = createHarness(other, { config: { sweepBatchSize: 50 } });
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
