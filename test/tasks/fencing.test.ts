// Fencing: a stale worker never writes over the new owner (S7), a message
// delivered twice runs once per epoch (S6), heartbeats are fenced too.
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { finishTasks, getTask, reapExpiredLeases, startTasks } from '../../src/db/sql/tasks.ts';
import { defineTask, LeaseLostError } from '../../src/handlers/registry.ts';
import { useTestDatabase, resetTables, T0, at } from '../helpers/db.ts';
import { latch } from '../helpers/faults.ts';
import { createHarness, type Harness } from '../helpers/harness.ts';
import { expectOneCompletion } from '../helpers/invariants.ts';


const t = useTestDatabase();
let h: Harness;
const runs: { id: string; epoch: number; attempt: number }[] = [];
let gate = latch();
let started = latch();
let heartbeatError: unknown;

const slowTask = defineTask('slow', z.object({}).default({}), async (_p, ctx) => {
  runs.push({ id: ctx.taskId, epoch: ctx.epoch, attempt: ctx.attempt });
  if (ctx.epoch === 1) {
    started.open();
    await gate.wait; // a worker that stalls while its lease runs out
    try {
      await ctx.heartbeat();
    } catch (error) {
      heartbeatError = error;
    }
  }
});
const countTask = defineTask('count', z.object({}).default({}), async (_p, ctx) => {
  runs.push({ id: ctx.taskId, epoch: ctx.epoch, attempt: ctx.attempt });
});

beforeEach(async () => {
  await resetTables(t.db);
  runs.length = 0;
  gate = latch();
  started = latch();
  heartbeatError = undefined;
  h = createHarness(t.db, { handlers: [slowTask, countTask] });
});

describe('S7: a stale consumer', () => {
  it('cannot write its result once the task was reaped and re-claimed; the new owner result stands', async () => {
    const [r] = await h.enqueue({ task: 'slow', timeout: 600 }, { now: T0 });
    const id = r!.task!.id;
    await h.sweep({ now: T0 });
    const [m1] = h.outbox.take();

    const stale = h.consume([m1!.body], { now: T0 });
    await started.wait;

    // The stalled attempt's lease (600 s timeout + 30 s grace) runs out: the
    // reaper counts the attempt as failed and the retry is claimed at epoch 2.
    const sweep = await h.sweep({ now: at(631) });
    expect(sweep.reaped.retried).toBe(1);
    expect(sweep.claimed).toBe(1);
    const [m2] = h.outbox.take();
    expect(m2!.body.epoch).toBe(2);

    const fresh = await h.consume([m2!.body], { now: at(632) });
    expect(fresh.results).toEqual([{ id, outcome: 'succeeded', status: 'succeeded' }]);
    const owner = await getTask(t.db, 'acme', id);

    gate.open();
    const late = await stale;
    expect(late.results).toEqual([{ id, outcome: 'succeeded', status: 'lost' }]);
    expect(heartbeatError).toBeInstanceOf(LeaseLostError);

    const after = await getTask(t.db, 'acme', id);
    expect(after).toEqual(owner);
    expect(after).toMatchObject({ status: 'succeeded', leaseEpoch: 2, attempts: 2 });
    const lost = h.logs.find((l) => l.msg === 'fenced write lost');
    expect(lost).toMatchObject({ step: 'finish', taskId: id, epoch: 1, currentEpoch: 2, currentStatus: 'succeeded' });
    expect(runs.map((r) => r.epoch)).toEqual([1, 2]);
    await expectOneCompletion(t.db);
  });

  it('a heartbeat from the current epoch extends the lease', async () => {
    let lease: Date | undefined;
    const hb = defineTask('hb', z.object({}).default({}), async (_p, ctx) => {
      await ctx.heartbeat(3600);
      const [row] = await t.db.query<{ lease_expires_at: Date }>('select lease_expires_at from tasks where id = $1', [ctx.taskId]);
      lease = row!.lease_expires_at;
    });
    h = createHarness(t.db, { handlers: [hb] });
    const [r] = await h.enqueue({ task: 'hb' }, { now: T0 });
    await h.sweep({ now: T0 });
    await h.consume(h.outbox.take().map((m) => m.body), { now: T0 });
    expect(lease!.toISOString()).toBe(at(3600).toISOString());
    expect(await getTask(t.db, 'acme', r!.task!.id)).toMatchObject({ status: 'succeeded' });
  });
});

describe('S6: the same message delivered twice', () => {
  async function dispatchOne() {
    const [r] = await h.enqueue({ task: 'count' }, { now: T0 });
    await h.sweep({ now: T0 });
    const [m] = h.outbox.take();
    return { id: r!.task!.id, body: m!.body };
  }

  it('twice in one batch: one run', async () => {
    const { id, body } = await dispatchOne();
    const out = await h.consume([body, body], { now: T0 });
    expect(out.verdicts).toEqual(['ack', 'ack']);
    expect(runs.filter((r) => r.id === id)).toHaveLength(1);
  });

  it('concurrently, in two consumers: one run', async () => {
    const { id, body } = await dispatchOne();
    const other = createHarness(await t.open(), { handlers: [countTask] });
    await Promise.all([h.consume([body], { now: T0 }), other.consume([body], { now: T0 })]);
    expect(runs.filter((r) => r.id === id)).toHaveLength(1);
    expect(await getTask(t.db, 'acme', id)).toMatchObject({ status: 'succeeded', attempts: 1 });
  });

  it('in sequence, and a whole batch retried: one run per task', async () => {
    const inputs = Array.from({ length: 10 }, () => ({ task: 'count' }));
    await h.enqueue(inputs, { now: T0 });
    await h.sweep({ now: T0 });
    const batch = h.outbox.take().map((m) => m.body);
    expect(batch).toHaveLength(10);
    await h.consume(batch, { now: T0 });
    const again = await h.consume(batch, { now: at(5) });
    expect(again.verdicts.every((v) => v === 'ack')).toBe(true);
    expect(again.results).toEqual([]);
    expect(runs).toHaveLength(10);
    expect(new Set(runs.map((r) => r.id)).size).toBe(10);
  });
});

describe('S8: the reaper racing a completion', () => {
  it('for each task exactly one of them wins, and the loser changes nothing', async () => {
    const n = 200;
    await h.enqueue(Array.from({ length: n }, () => ({ task: 'count', timeout: 1 })), { now: T0 });
    await h.sweep({ now: T0 });
    const bodies = h.outbox.take().map((m) => m.body);
    // Start every attempt, then let the leases (1 s timeout + 30 s grace) run out.
    await startTasks(t.db, { now: T0, tasks: bodies, leaseGraceSeconds: 30 });
    const late = at(32);
    const other = await t.open({ maxConnections: 2 });
    const [finish, reaped] = await Promise.all([
      finishTasks(t.db, { now: late, results: bodies.map((b) => ({ ...b, outcome: 'succeeded' as const, error: null, retryDelayMs: null })) }),
      reapExpiredLeases(other, { now: late, limit: n, dispatchLeaseSeconds: 900 }),
    ]);
    // Every task went one way: finished by its owner, or reaped (and that finish lost).
    expect(finish.finished.length + reaped.retried).toBe(n);
    expect(finish.lost.length).toBe(reaped.retried);
    const rows = await t.db.query<{ status: string; n: number }>(`select status, count(*)::int as n from tasks group by 1 order by 1`);
    const byStatus = Object.fromEntries(rows.map((r) => [r.status, r.n]));
    expect(byStatus.succeeded ?? 0).toBe(finish.finished.length);
    expect((byStatus.scheduled ?? 0) + (byStatus.queued ?? 0)).toBe(reaped.retried);
    await expectOneCompletion(t.db);
  });
});
