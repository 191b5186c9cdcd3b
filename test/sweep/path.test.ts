// The walking skeleton in Node: enqueue, sweep, consume, succeeded.
import { beforeEach, describe, expect, it } from 'vitest';
import { getTask } from '../../src/db/sql/tasks-read.ts';
import { useTestDatabase, resetTables } from '../helpers/db.ts';
import { createHarness, type Harness } from '../helpers/harness.ts';

const t = useTestDatabase();
let h: Harness;
beforeEach(async () => {
  await resetTables(t.db);
  h = createHarness(t.db);
});

describe('enqueue → sweep → consume', () => {
  it('runs a task due now to succeeded, one statement per step', async () => {
    const [r] = await h.enqueue({ task: 'noop', payload: { hello: 'world' } });
    expect(r!.outcome).toBe('created');
    expect(r!.task!.status).toBe('queued');

    const counts = await h.sweep();
    expect(counts.claimed).toBe(1);
    expect(counts.dispatched).toBe(1);
    const sent = h.outbox.take();
    expect(sent).toHaveLength(1);
    expect(sent[0]!.body).toMatchObject({ id: r!.task!.id, epoch: 1 });
    expect(sent[0]!.delaySeconds).toBeUndefined();

    const running = await getTask(t.db, 'acme', r!.task!.id);
    expect(running!.status).toBe('running');
    expect(running!.dispatchedAt).not.toBeNull();
    expect(running!.attempts).toBe(1);

    const out = await h.consume(sent.map((m) => m.body));
    expect(out.verdicts).toEqual(['ack']);
    expect(out.results).toEqual([{ id: r!.task!.id, outcome: 'succeeded', status: 'succeeded' }]);

    const done = await getTask(t.db, 'acme', r!.task!.id);
    expect(done!.status).toBe('succeeded');
    expect(done!.finishedAt).not.toBeNull();
    expect(done!.startedAt).not.toBeNull();
    expect(done!.payload).toEqual({ hello: 'world' });
  });

  it('keeps a future task scheduled until it is within the look-ahead, then sends it with a delay', async () => {
    const now = new Date('2026-12-01T12:00:00.000Z');
    const [r] = await h.enqueue({ task: 'noop', runAt: new Date('2026-12-01T12:05:37.250Z') }, { now });
    expect(r!.task!.status).toBe('scheduled');
    // A task due now in the same queue: the sweep claims it, and only it.
    const [due] = await h.enqueue({ task: 'noop' }, { now });

    expect((await h.sweep({ now })).claimed).toBe(1);
    expect(h.outbox.take().map((m) => m.body.id)).toEqual([due!.task!.id]);
    expect(await getTask(t.db, 'acme', r!.task!.id)).toMatchObject({ status: 'scheduled', attempts: 0 });

    // Five minutes on: the future task is within the look-ahead; the due one is still in flight, untouched.
    const later = new Date('2026-12-01T12:05:00.000Z');
    const counts = await h.sweep({ now: later });
    expect(counts.promoted).toBe(1);
    expect(counts.claimed).toBe(1);
    expect(await getTask(t.db, 'acme', due!.task!.id)).toMatchObject({ status: 'running', epoch: 1 });
    const [m] = h.outbox.take();
    // 37.25 s ahead: rounded down to whole seconds, less the Queue's 1 s batch
    // timeout; the consumer waits out the rest.
    expect(m!.delaySeconds).toBe(36);
    expect(m!.body.runAt).toBe(Date.parse('2026-12-01T12:05:37.250Z'));

    const out = await h.consume([m!.body], { now: new Date('2026-12-01T12:05:37.000Z') });
    expect(out.results[0]!.status).toBe('succeeded');
    const done = await getTask(t.db, 'acme', r!.task!.id);
    // Started on its due millisecond, not when the message arrived.
    expect(done!.startedAt!.toISOString()).toBe('2026-12-01T12:05:37.250Z');
  });

  it('delay is counted from the database clock', async () => {
    const now = new Date('2026-12-01T12:00:00.000Z');
    const [r] = await h.enqueue({ task: 'noop', delay: 600 }, { now });
    expect(r!.task!.runAt.toISOString()).toBe('2026-12-01T12:10:00.000Z');
    expect(r!.task!.status).toBe('scheduled');
  });
});
