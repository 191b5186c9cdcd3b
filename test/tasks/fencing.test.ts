// Fencing: a stale worker never writes over the new owner (S7), a message
// delivered twice runs once per epoch (S6), heartbeats are fenced too.
import { beforeEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { finishIfRunning, startIfClaimed } from '../../src/db/sql/tasks-fence.ts';
import { getTask } from '../../src/db/sql/tasks-read.ts';
import { reapExpiredLeases } from '../../src/db/sql/tasks-maintenance.ts';
import { LeaseLostError } from '../../src/handlers/errors.ts';
import { defineTask } from '../../src/handlers/registry.ts';
import { useTestDatabase, resetTables, T0, at } from '../helpers/db.ts';
import { crashAt, latch } from '../helpers/faults.ts';
import { setQueuePaused } from '../../src/db/sql/tenants.ts';
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
    expect(after).toMatchObject({ status: 'succeeded', epoch: 2, attempts: 2 });
    const lost = h.logs.find((l) => l.msg === 'fenced write lost');
    expect(lost).toMatchObject({ step: 'finishIfRunning', taskId: id, epoch: 1, currentEpoch: 2, currentStatus: 'succeeded' });
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

describe('S7: a stale worker while the new owner is still at work', () => {
  it('a stale heartbeat and a stale finish arriving while the new owner runs are refused; the new owner result stands', async () => {
    const newOwnerRunning = latch();
    const newOwnerGate = latch();
    // Epoch 1 stalls and then fails; epoch 2 is still running when that failure arrives.
    const twoOwners = defineTask('two-owners', z.object({}).default({}), async (_p, ctx) => {
      runs.push({ id: ctx.taskId, epoch: ctx.epoch, attempt: ctx.attempt });
      if (ctx.epoch === 1) {
        started.open();
        await gate.wait;
        try {
          await ctx.heartbeat();
        } catch (error) {
          heartbeatError = error;
        }
        throw new Error('stale attempt failed');
      }
      newOwnerRunning.open();
      await newOwnerGate.wait;
    });
    h = createHarness(t.db, { handlers: [twoOwners] });
    const [r] = await h.enqueue({ task: 'two-owners', timeout: 600, maxAttempts: 3 }, { now: T0 });
    const id = r!.task!.id;
    await h.sweep({ now: T0 });
    const stale = h.consume(h.outbox.take().map((m) => m.body), { now: T0 });
    await started.wait;

    // The stalled attempt's lease runs out; the retry is claimed at epoch 2 and starts.
    await h.sweep({ now: at(631) });
    const [m2] = h.outbox.take();
    expect(m2!.body.epoch).toBe(2);
    const fresh = h.consume([m2!.body], { now: at(632) });
    await newOwnerRunning.wait;

    // The stale worker reports while the new owner is still running: refused.
    gate.open();
    const late = await stale;
    expect(heartbeatError).toBeInstanceOf(LeaseLostError);
    expect(late.results).toEqual([{ id, outcome: 'failed', status: 'lost' }]);
    expect(await getTask(t.db, 'acme', id)).toMatchObject({ status: 'running', epoch: 2, lastError: expect.stringMatching(/lease expired/) });
    const lost = h.logs.find((l) => l.msg === 'fenced write lost');
    expect(lost).toMatchObject({ step: 'finishIfRunning', taskId: id, epoch: 1, currentEpoch: 2, currentStatus: 'running' });

    // The new owner finishes: its result stands.
    newOwnerGate.open();
    expect((await fresh).results).toEqual([{ id, outcome: 'succeeded', status: 'succeeded' }]);
    expect(await getTask(t.db, 'acme', id)).toMatchObject({ status: 'succeeded', epoch: 2, attempts: 2 });
    expect(runs.map((x) => x.epoch)).toEqual([1, 2]);
    await expectOneCompletion(t.db);
  });

  it('a stale dispatched mark arriving after a re-claim changes nothing and is reported lost', async () => {
    const [r] = await h.enqueue({ task: 'count' }, { now: T0 });
    const id = r!.task!.id;
    // Sweep A sends, then stalls before its dispatched mark (a cut-off invocation that resumes late).
    const sent = latch();
    const resume = latch();
    const sweepA = h.sweep({
      now: T0,
      workerId: 'sweep-a',
      faults: async (point) => {
        if (point === 'sweep.after_send') {
          sent.open();
          await resume.wait;
        }
      },
    });
    await sent.wait;
    h.outbox.take(); // A's message is lost in transit

    // A's claim lease runs out: sweep B puts the task back (never dispatched), re-claims it at epoch 2 and marks it.
    const claimLease = h.config.claimLeaseSeconds;
    const b = await h.sweep({ now: at(claimLease + 1), workerId: 'sweep-b' });
    expect(b).toMatchObject({ claimed: 1, dispatched: 1, lost: 0 });
    expect(b.reaped.requeued).toBe(1);
    const owner = await getTask(t.db, 'acme', id);
    expect(owner).toMatchObject({ status: 'running', epoch: 2 });

    resume.open();
    const a = await sweepA;
    expect(a).toMatchObject({ claimed: 1, dispatched: 0, lost: 1 });
    expect(await getTask(t.db, 'acme', id)).toEqual(owner);
    const lost = h.logs.find((l) => l.msg === 'fenced write lost' && l.step === 'markDispatched');
    expect(lost).toMatchObject({ taskId: id, epoch: 1, currentEpoch: 2, currentStatus: 'running' });
  });

  it('a stale release (a send that failed late) arriving after a re-claim leaves the new claim alone', async () => {
    const [r] = await h.enqueue({ task: 'count' }, { now: T0 });
    const id = r!.task!.id;
    // Sweep A's send hangs past its claim lease, then fails: A gives its claims back.
    const sendingA = latch();
    const failA = latch();
    const sweepA = h.sweep({
      now: T0,
      workerId: 'sweep-a',
      sender: {
        async sendBatch() {
          sendingA.open();
          await failA.wait;
          throw new Error('queue unavailable');
        },
      },
    });
    await sendingA.wait;

    // Meanwhile sweep B re-claims the task at epoch 2 and is itself still sending.
    const sendingB = latch();
    const sendB = latch();
    const sweepB = h.sweep({
      now: at(h.config.claimLeaseSeconds + 1),
      workerId: 'sweep-b',
      sender: {
        async sendBatch(batch) {
          sendingB.open();
          await sendB.wait;
          await h.outbox.sendBatch(batch);
        },
      },
    });
    await sendingB.wait;
    expect(await getTask(t.db, 'acme', id)).toMatchObject({ status: 'running', epoch: 2, attempts: 1 });

    failA.open();
    await expect(sweepA).rejects.toThrow('queue unavailable');
    const released = h.logs.find((l) => l.msg === 'send to queue failed; claims released');
    expect(released).toMatchObject({ claimed: 1, released: 0 });
    expect(await getTask(t.db, 'acme', id)).toMatchObject({ status: 'running', epoch: 2, attempts: 1 });

    // B's claim is intact: its send and mark go through, and its message runs the task.
    sendB.open();
    expect(await sweepB).toMatchObject({ claimed: 1, dispatched: 1, lost: 0 });
    const [m] = h.outbox.take();
    expect(m!.body).toMatchObject({ id, epoch: 2 });
    expect((await h.consume([m!.body], { now: at(h.config.claimLeaseSeconds + 2) })).results).toEqual([
      { id, outcome: 'succeeded', status: 'succeeded' },
    ]);
    await expectOneCompletion(t.db);
  });

  it('a consumer quicker than the dispatched mark: the late mark leaves the running attempt alone', async () => {
    const running = latch();
    const release = latch();
    const hold = defineTask('hold', z.object({}).default({}), async () => {
      running.open();
      await release.wait;
    });
    h = createHarness(t.db, { handlers: [hold] });
    const [r] = await h.enqueue({ task: 'hold', timeout: 600 }, { now: T0 });
    const id = r!.task!.id;
    const sent = latch();
    const resume = latch();
    const sweep = h.sweep({
      now: T0,
      faults: async (point) => {
        if (point === 'sweep.after_send') {
          sent.open();
          await resume.wait;
        }
      },
    });
    await sent.wait;
    // The message arrives and the handler starts before the sweep writes its mark.
    const consumed = h.consume(h.outbox.take().map((m) => m.body), { now: at(1) });
    await running.wait;
    const started = await getTask(t.db, 'acme', id);
    expect(started).toMatchObject({ status: 'running', startedAt: at(1), dispatchedAt: at(1) });

    resume.open();
    expect(await sweep).toMatchObject({ claimed: 1, dispatched: 1, lost: 0 });
    // The lease stays the running attempt's (timeout + grace from its start), not the shorter dispatch lease.
    expect(await getTask(t.db, 'acme', id)).toEqual(started);
    expect(h.logs.filter((l) => l.msg === 'fenced write lost')).toEqual([]);

    release.open();
    expect((await consumed).results).toEqual([{ id, outcome: 'succeeded', status: 'succeeded' }]);
  });

  it('a send that delivered, then reported failure: the release leaves the attempt the consumer started', async () => {
    const running = latch();
    const release = latch();
    const hold = defineTask('hold', z.object({}).default({}), async () => {
      running.open();
      await release.wait;
    });
    h = createHarness(t.db, { handlers: [hold] });
    const [r] = await h.enqueue({ task: 'hold', timeout: 600 }, { now: T0 });
    const id = r!.task!.id;
    const delivered = latch();
    const fail = latch();
    const sweep = h.sweep({
      now: T0,
      sender: {
        async sendBatch(batch) {
          await h.outbox.sendBatch(batch); // the Queue took it ...
          delivered.open();
          await fail.wait;
          throw new Error('response lost'); // ... but the producer saw an error
        },
      },
    });
    await delivered.wait;
    const consumed = h.consume(h.outbox.take().map((m) => m.body), { now: at(1) });
    await running.wait;

    fail.open();
    await expect(sweep).rejects.toThrow('response lost');
    expect(h.logs.find((l) => l.msg === 'send to queue failed; claims released')).toMatchObject({ claimed: 1, released: 0 });
    expect(await getTask(t.db, 'acme', id)).toMatchObject({ status: 'running', attempts: 1, startedAt: at(1) });

    release.open();
    expect((await consumed).results).toEqual([{ id, outcome: 'succeeded', status: 'succeeded' }]);
    expect(await getTask(t.db, 'acme', id)).toMatchObject({ status: 'succeeded', attempts: 1, epoch: 1 });
  });

  it('at_most_once: once the reaper ended a stalled attempt dead, its heartbeat raises LeaseLostError and its result is lost', async () => {
    const [r] = await h.enqueue({ task: 'slow', timeout: 600, delivery: 'at_most_once' }, { now: T0 });
    const id = r!.task!.id;
    await h.sweep({ now: T0 });
    const stale = h.consume(h.outbox.take().map((m) => m.body), { now: T0 });
    await started.wait;
    const sweep = await h.sweep({ now: at(631) });
    expect(sweep.reaped).toEqual({ requeued: 0, retried: 0, dead: 1 });
    const dead = await getTask(t.db, 'acme', id);
    expect(dead).toMatchObject({ status: 'dead', epoch: 1 });

    gate.open(); // the stalled handler wakes, heartbeats, and reports
    const late = await stale;
    expect(heartbeatError).toBeInstanceOf(LeaseLostError);
    // Fenced out, not failed: the result is refused and the message acknowledged.
    expect(late).toMatchObject({ verdicts: ['ack'], results: [{ id, outcome: 'succeeded', status: 'lost' }] });
    expect(h.logs.filter((l) => l.msg === 'fenced write lost')).toMatchObject([
      { step: 'finishIfRunning', taskId: id, epoch: 1, currentEpoch: 1, currentStatus: 'dead' },
    ]);
    expect(await getTask(t.db, 'acme', id)).toEqual(dead);
  });
});

describe('S7: a stale message for a paused queue', () => {
  it('is skipped as stale; the new claim is not taken back by it', async () => {
    const [r] = await h.enqueue({ task: 'count' }, { now: T0 });
    const id = r!.task!.id;
    // Epoch 1's sweep is cut off after the send: its message is in flight, unmarked.
    await expect(h.sweep({ now: T0, faults: crashAt('sweep.after_send') })).rejects.toThrow('crash injected');
    const [m1] = h.outbox.take();
    // The claim lease runs out; the next sweep puts it back and re-claims it at epoch 2.
    const b = await h.sweep({ now: at(h.config.claimLeaseSeconds + 1) });
    expect(b).toMatchObject({ claimed: 1, dispatched: 1 });
    const [m2] = h.outbox.take();
    expect(m2!.body.epoch).toBe(2);
    await setQueuePaused(t.db, { queue: 'default', paused: true });
    const claimed = await getTask(t.db, 'acme', id);

    // Epoch 1's message arrives late: stale, whatever the queue's state.
    const late = await h.consume([m1!.body], { now: at(h.config.claimLeaseSeconds + 2) });
    expect(late).toMatchObject({ verdicts: ['ack'], results: [] });
    expect(await getTask(t.db, 'acme', id)).toEqual(claimed);
    // Epoch 2's message finds the queue paused: its claim goes back, the attempt refunded.
    await h.consume([m2!.body], { now: at(h.config.claimLeaseSeconds + 3) });
    expect(await getTask(t.db, 'acme', id)).toMatchObject({ status: 'queued', attempts: 0, epoch: 2 });
    expect(runs).toEqual([]);
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

  it('again while the first delivery is still running: skipped, one run', async () => {
    const running = latch();
    const release = latch();
    const hold = defineTask('hold', z.object({}).default({}), async (_p, ctx) => {
      runs.push({ id: ctx.taskId, epoch: ctx.epoch, attempt: ctx.attempt });
      running.open();
      if (runs.length === 1) await release.wait; // a second run (the bug) returns at once
    });
    h = createHarness(t.db, { handlers: [hold] });
    const [r] = await h.enqueue({ task: 'hold' }, { now: T0 });
    await h.sweep({ now: T0 });
    const [m] = h.outbox.take();
    const first = h.consume([m!.body], { now: T0 });
    await running.wait;
    const again = await h.consume([m!.body], { now: at(1) });
    expect(again).toMatchObject({ verdicts: ['ack'], results: [], skipped: 1 });
    release.open();
    expect((await first).results).toEqual([{ id: r!.task!.id, outcome: 'succeeded', status: 'succeeded' }]);
    expect(runs).toHaveLength(1);
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
    await startIfClaimed(t.db, { now: T0, tasks: bodies, leaseGraceSeconds: 30 });
    const late = at(32);
    const other = await t.open({ maxConnections: 2 });
    const [finish, reaped] = await Promise.all([
      finishIfRunning(t.db, { now: late, results: bodies.map((b) => ({ ...b, outcome: 'succeeded' as const, error: null, retryDelayMs: null })) }),
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

  it('a finish arriving after the reaper scheduled the retry is lost and changes nothing', async () => {
    await h.enqueue({ task: 'count', timeout: 1 }, { now: T0 });
    await h.sweep({ now: T0 });
    const [m] = h.outbox.take();
    await startIfClaimed(t.db, { now: T0, tasks: [m!.body], leaseGraceSeconds: 30 });
    expect(await reapExpiredLeases(t.db, { now: at(32), limit: 10, dispatchLeaseSeconds: h.config.dispatchLeaseSeconds })).toMatchObject({
      retried: 1,
    });
    const late = await finishIfRunning(t.db, {
      now: at(33),
      results: [{ ...m!.body, outcome: 'succeeded', error: null, retryDelayMs: null }],
    });
    expect(late.finished).toEqual([]);
    expect(late.lost).toMatchObject([{ id: m!.body.id, currentStatus: 'scheduled' }]);
    const rows = await t.db.query(`select status, finished_at from tasks`);
    expect(rows).toEqual([{ status: 'scheduled', finished_at: null }]);
  });
});
