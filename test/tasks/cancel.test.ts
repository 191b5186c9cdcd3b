// Cancel: until the handler starts (even once handed to the Queue with a
// delay, which the consumer then skips); 409 after; terminal states never move.
import { beforeEach, describe, expect, it } from 'vitest';
import { getTask } from '../../src/db/sql/tasks-read.ts';
import { cancelTask } from '../../src/tasks/cancel.ts';
import { useTestDatabase, resetTables, T0, at } from '../helpers/db.ts';
import { createHarness, type Harness } from '../helpers/harness.ts';
import { latch } from '../helpers/faults.ts';
import { createTestApi } from '../helpers/http.ts';
import { defineTask } from '../../src/handlers/registry.ts';
import { z } from 'zod';

const t = useTestDatabase();
let h: Harness;

beforeEach(async () => {
  await resetTables(t.db);
  h = createHarness(t.db);
});

describe('cancel', () => {
  it('cancels a scheduled task by id and a queued one by idempotency key', async () => {
    const [a] = await h.enqueue({ task: 'noop', delay: 3600 }, { now: T0 });
    const [b] = await h.enqueue({ task: 'noop', idempotencyKey: 'order-7' }, { now: T0 });
    const ca = await cancelTask(t.db, 'acme', { id: a!.task!.id }, at(1));
    expect(ca).toMatchObject({ status: 'cancelled', finishedAt: at(1) });
    const cb = await cancelTask(t.db, 'acme', { idempotencyKey: 'order-7' }, at(1));
    expect(cb).toMatchObject({ id: b!.task!.id, status: 'cancelled' });
    // Nothing is dispatched afterwards.
    await h.drain({ now: at(7200) });
    expect(h.outbox.messages).toEqual([]);
    // Cancelling twice is harmless; the task stays as it was.
    expect(await cancelTask(t.db, 'acme', { id: a!.task!.id }, at(2))).toEqual(ca);
  });

  it('cancels a task already sent with a delay; the consumer then skips it', async () => {
    const [r] = await h.enqueue({ task: 'noop', delay: 30 }, { now: T0 });
    await h.sweep({ now: T0 });
    const [m] = h.outbox.take();
    expect(m!.delaySeconds).toBe(29); // 30 s, less the Queue's 1 s batch timeout
    await cancelTask(t.db, 'acme', { id: r!.task!.id }, at(10));
    const out = await h.consume([m!.body], { now: at(30) });
    expect(out.verdicts).toEqual(['ack']);
    expect(out.results).toEqual([]);
    expect(await getTask(t.db, 'acme', r!.task!.id)).toMatchObject({ status: 'cancelled', startedAt: null });
  });

  it('answers conflict once the handler has started or the task finished', async () => {
    const [r] = await h.enqueue({ task: 'noop' }, { now: T0 });
    await h.drain({ now: T0 });
    await expect(cancelTask(t.db, 'acme', { id: r!.task!.id }, at(1))).rejects.toMatchObject({
      code: 'conflict',
      message: 'the task is already succeeded',
    });
    expect(await getTask(t.db, 'acme', r!.task!.id)).toMatchObject({ status: 'succeeded' });
  });

  it('a cancel while the handler runs answers 409, and the handler result stands', async () => {
    const running = latch();
    const finish = latch();
    const slow = defineTask('slow', z.object({}).default({}), async () => {
      running.open();
      await finish.wait;
    });
    h = createHarness(t.db, { handlers: [slow] });
    const api = createTestApi(t.db);
    const [r] = await h.enqueue({ task: 'slow', idempotencyKey: 'in-flight' }, { now: T0 });
    const id = r!.task!.id;
    await h.sweep({ now: T0 });
    const consumed = h.consume(h.outbox.take().map((m) => m.body), { now: at(1) });
    await running.wait;

    for (const path of [`/v1/tasks/${id}`, '/v1/tasks/by-key/in-flight']) {
      const res = await api.admin('DELETE', path, { tenant: 'acme' });
      expect(res.status, path).toBe(409);
      expect(res.body.error).toMatchObject({ code: 'conflict', message: 'the task has already started' });
    }
    expect(await getTask(t.db, 'acme', id)).toMatchObject({ status: 'running', finishedAt: null });

    finish.open();
    expect((await consumed).results).toEqual([{ id, outcome: 'succeeded', status: 'succeeded' }]);
    expect(await getTask(t.db, 'acme', id)).toMatchObject({ status: 'succeeded', startedAt: at(1) });
  });

  it('a cancel between the send and the dispatched mark: the mark changes nothing, the consumer skips it', async () => {
    const [r] = await h.enqueue({ task: 'noop' }, { now: T0 });
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
    const cancelled = await cancelTask(t.db, 'acme', { id }, at(1));
    expect(cancelled).toMatchObject({ status: 'cancelled', dispatchedAt: null });
    resume.open();
    expect(await sweep).toMatchObject({ claimed: 1, dispatched: 0, lost: 1 });
    expect(await getTask(t.db, 'acme', id)).toEqual(cancelled);
    const out = await h.consume(h.outbox.take().map((m) => m.body), { now: at(2) });
    expect(out.results).toEqual([]);
    expect(await getTask(t.db, 'acme', id)).toEqual(cancelled);
  });

  it('a cancel while the send hangs: the failed send gives nothing back, the task stays cancelled', async () => {
    const [r] = await h.enqueue({ task: 'noop' }, { now: T0 });
    const id = r!.task!.id;
    const sending = latch();
    const fail = latch();
    const sweep = h.sweep({
      now: T0,
      sender: {
        async sendBatch() {
          sending.open();
          await fail.wait;
          throw new Error('queue unavailable');
        },
      },
    });
    await sending.wait;
    const cancelled = await cancelTask(t.db, 'acme', { id }, at(1));
    fail.open();
    await expect(sweep).rejects.toThrow('queue unavailable');
    expect(await getTask(t.db, 'acme', id)).toEqual(cancelled);
    await h.drain({ now: at(60) });
    expect(h.outbox.messages).toEqual([]);
  });

  it('two tenants using one idempotency key each cancel their own task by key', async () => {
    const [mine] = await h.enqueue({ task: 'noop', idempotencyKey: 'shared', delay: 3600 }, { now: T0 });
    const [theirs] = await h.enqueue({ task: 'noop', idempotencyKey: 'shared', delay: 3600 }, { now: T0, tenant: 'other' });
    const c = await cancelTask(t.db, 'other', { idempotencyKey: 'shared' }, at(1));
    expect(c).toMatchObject({ id: theirs!.task!.id, status: 'cancelled' });
    expect(await getTask(t.db, 'acme', mine!.task!.id)).toMatchObject({ status: 'scheduled' });
    // Already cancelled: answered from this tenant's own row.
    expect(await cancelTask(t.db, 'other', { idempotencyKey: 'shared' }, at(2))).toEqual(c);
  });

  it("answers not found for an unknown id, an unknown key, and another tenant's task", async () => {
    const [r] = await h.enqueue({ task: 'noop', idempotencyKey: 'mine', delay: 60 }, { now: T0 });
    await expect(cancelTask(t.db, 'acme', { id: '987654' })).rejects.toMatchObject({ code: 'not_found' });
    await expect(cancelTask(t.db, 'acme', { idempotencyKey: 'nope' })).rejects.toMatchObject({ code: 'not_found' });
    await expect(cancelTask(t.db, 'intruder', { id: r!.task!.id })).rejects.toMatchObject({ code: 'not_found' });
    await expect(cancelTask(t.db, 'intruder', { idempotencyKey: 'mine' })).rejects.toMatchObject({ code: 'not_found' });
    expect(await getTask(t.db, 'acme', r!.task!.id)).toMatchObject({ status: 'queued' });
  });
});
