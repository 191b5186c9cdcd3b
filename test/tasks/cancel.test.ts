// Cancel: until the handler starts (even once handed to the Queue with a
// delay, which the consumer then skips); 409 after; terminal states never move.
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { getTask } from '../../src/db/sql/tasks.ts';
import { cancelTask } from '../../src/tasks/cancel.ts';
import { useTestDatabase, resetTables, T0, at } from '../helpers/db.ts';
import { createHarness, type Harness } from '../helpers/harness.ts';

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

  it("answers not found for an unknown id, an unknown key, and another tenant's task", async () => {
    const [r] = await h.enqueue({ task: 'noop', idempotencyKey: 'mine', delay: 60 }, { now: T0 });
    await expect(cancelTask(t.db, 'acme', { id: '987654' })).rejects.toMatchObject({ code: 'not_found' });
    await expect(cancelTask(t.db, 'acme', { idempotencyKey: 'nope' })).rejects.toMatchObject({ code: 'not_found' });
    await expect(cancelTask(t.db, 'intruder', { id: r!.task!.id })).rejects.toMatchObject({ code: 'not_found' });
    await expect(cancelTask(t.db, 'intruder', { idempotencyKey: 'mine' })).rejects.toMatchObject({ code: 'not_found' });
    expect(await getTask(t.db, 'acme', r!.task!.id)).toMatchObject({ status: 'queued' });
  });
});
