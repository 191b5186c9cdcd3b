// A cut at every step boundary of the sweep and the consumer (RELIABILITY
// S1, S2, S3, S15): the task still reaches a terminal state, with the attempt
// count the rules say, and never runs twice where that is promised.
import { beforeEach, describe, expect, it } from 'vitest';
import { settleDeadLetters } from '../../src/consume/dead-letters.ts';
import { getTask } from '../../src/db/sql/tasks-read.ts';
import { silentLogger } from '../../src/log.ts';
import type { TaskInput } from '../../src/tasks/enqueue.ts';
import { useTestDatabase, resetTables, T0, at } from '../helpers/db.ts';
import { Crash, crashAt } from '../helpers/faults.ts';
import { countingTask, createHarness, type Harness } from '../helpers/harness.ts';
import { expectNoLoss, expectOneCompletion } from '../helpers/invariants.ts';

const t = useTestDatabase();
let h: Harness;
const { task: countTask, runs } = countingTask();

beforeEach(async () => {
  await resetTables(t.db);
  runs.clear();
  h = createHarness(t.db, { handlers: [countTask] });
});

async function enqueue(input: Partial<TaskInput> = {}) {
  const [r] = await h.enqueue({ task: 'count', ...input }, { now: T0 });
  return r!.task!.id;
}
const task = (id: string) => getTask(t.db, 'acme', id);

describe('cut off in the sweep', () => {
  it('S1 after the claim, before the send: the reaper gives the claim back without spending an attempt', async () => {
    const id = await enqueue();
    await expect(h.sweep({ now: T0, faults: crashAt('sweep.after_claim') })).rejects.toThrow(Crash);
    expect(h.outbox.messages).toEqual([]);
    expect(await task(id)).toMatchObject({ status: 'running', attempts: 1, epoch: 1, dispatchedAt: null });

    // Within the claim lease nothing happens to it.
    const early = await h.sweep({ now: at(30) });
    expect(early.reaped.requeued + early.claimed).toBe(0);

    const later = await h.sweep({ now: at(61) });
    expect(later.reaped.requeued).toBe(1);
    expect(later.claimed).toBe(1);
    expect(await task(id)).toMatchObject({ status: 'running', attempts: 1, epoch: 2 });

    await h.consume(h.outbox.take().map((m) => m.body), { now: at(61) });
    expect(await task(id)).toMatchObject({ status: 'succeeded', attempts: 1, epoch: 2 });
    expect(runs.get(id)).toBe(1);
    await expectNoLoss(t.db, at(61));
    await expectOneCompletion(t.db);
  });

  it('S2 after the send, before the dispatched mark: a delivered message still runs, once', async () => {
    const id = await enqueue();
    await expect(h.sweep({ now: T0, faults: crashAt('sweep.after_send') })).rejects.toThrow(Crash);
    const sent = h.outbox.take();
    expect(sent).toHaveLength(1);
    expect(await task(id)).toMatchObject({ status: 'running', dispatchedAt: null });

    await h.consume(sent.map((m) => m.body), { now: at(1) });
    const done = await task(id);
    expect(done).toMatchObject({ status: 'succeeded', attempts: 1, epoch: 1 });
    expect(done!.dispatchedAt).not.toBeNull(); // the fenced start records the hand-off
    expect((await h.sweep({ now: at(3600) })).reaped).toEqual({ requeued: 0, retried: 0, dead: 0 });
    expect(runs.get(id)).toBe(1);
  });

  it('sent and marked but never started: held for the dispatch lease from its batch mark, then an attempt is spent', async () => {
    const id = await enqueue();
    await h.sweep({ now: T0 });
    expect(h.outbox.take()).toHaveLength(1); // lost in transit
    // The mark is the batch's row; reads show its time on the claimed task.
    expect((await task(id))!.dispatchedAt).toEqual(T0);
    // Past the claim lease (60 s), inside the dispatch lease (900 s): held.
    for (const s of [61, 899]) expect((await h.sweep({ now: at(s) })).reaped).toEqual({ requeued: 0, retried: 0, dead: 0 });
    expect(await task(id)).toMatchObject({ status: 'running', attempts: 1, epoch: 1 });
    // Past it: sent and never reported, so the attempt counts (at-least-once:
    // retried; the backoff is within the look-ahead, so the same sweep claims attempt 2).
    expect((await h.sweep({ now: at(901) })).reaped).toEqual({ requeued: 0, retried: 1, dead: 0 });
    expect(await task(id)).toMatchObject({ attempts: 2, epoch: 2, lastError: expect.stringContaining('lease expired') });
  });

  it('S2 with the message lost: re-claimed under a new epoch; the old message arriving late is skipped', async () => {
    const id = await enqueue();
    await expect(h.sweep({ now: T0, faults: crashAt('sweep.after_send') })).rejects.toThrow(Crash);
    const [lost] = h.outbox.take();

    const later = await h.sweep({ now: at(61) });
    expect(later.reaped.requeued).toBe(1);
    const [fresh] = h.outbox.take();
    expect(fresh!.body.epoch).toBe(2);

    const stale = await h.consume([lost!.body], { now: at(62) });
    expect(stale.verdicts).toEqual(['ack']);
    expect(stale.results).toEqual([]);
    expect(runs.get(id)).toBeUndefined();

    await h.consume([fresh!.body], { now: at(62) });
    expect(await task(id)).toMatchObject({ status: 'succeeded', attempts: 1, epoch: 2 });
    expect(runs.get(id)).toBe(1);
  });

  it('S15 the Queue refuses the batch: the claims are given back at once and the next sweep sends them', async () => {
    const ids = await Promise.all([enqueue(), enqueue(), enqueue()]);
    const failing = { sendBatch: async () => Promise.reject(new Error('queue unavailable')) };
    await expect(h.sweep({ now: T0, sender: failing })).rejects.toThrow('queue unavailable');
    for (const id of ids) expect(await task(id)).toMatchObject({ status: 'queued', attempts: 0, epoch: 1 });

    const next = await h.sweep({ now: at(1) });
    expect(next.claimed).toBe(3);
    expect(next.dispatched).toBe(3);
    for (const id of ids) expect(await task(id)).toMatchObject({ status: 'running', attempts: 1, epoch: 2 });
  });
});

describe('a claim larger than one sendBatch (SWEEP_BATCH_SIZE 500, sent 100 at a time, all at once)', () => {
  it('S15 in part: one send refused, every claim is given back once all its sends settled; what went out is skipped as stale', async () => {
    const big = createHarness(t.db, { handlers: [countTask], config: { sweepBatchSize: 250 } });
    await big.enqueue(Array.from({ length: 250 }, () => ({ task: 'count' })), { now: T0 });
    const accepted: { body: unknown }[] = [];
    const running = async () =>
      (await t.db.query<{ n: number }>(`select count(*)::int as n from tasks where status = 'running'`))[0]!.n;
    let runningWhenSlowSendEnded = -1;
    let call = 0;
    const partial = {
      async sendBatch(messages: Iterable<{ body: unknown }>) {
        const batch = [...messages];
        const n = ++call;
        if (n === 2) throw new Error('queue refused one batch');
        // The first send is still in flight when the second fails: the claims
        // must not be given back under it.
        if (n === 1) {
          await new Promise((resolve) => setTimeout(resolve, 200));
          runningWhenSlowSendEnded = await running();
        }
        accepted.push(...batch);
      },
    };
    await expect(big.sweep({ now: T0, sender: partial })).rejects.toThrow('queue refused one batch');
    expect(call).toBe(3); // 100 + 100 + 50, sent side by side
    expect(runningWhenSlowSendEnded).toBe(250);
    expect(await running()).toBe(0);
    expect(
      await t.db.query(`select status, attempts, count(*)::int as n from tasks group by 1, 2`),
    ).toEqual([{ status: 'queued', attempts: 0, n: 250 }]);

    // The 150 messages that went out find their tasks given back: skipped, nothing runs.
    expect(accepted).toHaveLength(150);
    const out = await big.consume(accepted.map((m) => m.body), { now: at(1) });
    expect(out.results).toEqual([]);
    expect(runs.size).toBe(0);

    // The next sweep sends them all; each runs once.
    await big.drain({ now: at(2) });
    expect(runs.size).toBe(250);
    expect([...runs.values()].every((n) => n === 1)).toBe(true);
    await expectOneCompletion(t.db);
  });
});

describe('cut off in the consumer', () => {
  it('after the start, before the handlers: the attempt counts as failed and the task retries', async () => {
    const id = await enqueue();
    await h.sweep({ now: T0 });
    const [m] = h.outbox.take();
    await expect(h.consume([m!.body], { now: T0, faults: crashAt('consume.after_start') })).rejects.toThrow(Crash);
    expect(runs.get(id)).toBeUndefined();

    // The Queue redelivers the unacknowledged message: already started, skipped.
    const again = await h.consume([m!.body], { now: at(1) });
    expect(again.verdicts).toEqual(['ack']);
    expect(again.results).toEqual([]);

    // Timeout 30 s + grace 30 s later the reaper counts the attempt; its
    // backoff (at most 1 s) is within the look-ahead, so the same sweep
    // claims the retry under a new epoch.
    const reap = await h.sweep({ now: at(61) });
    expect(reap.reaped.retried).toBe(1);
    const retry = await task(id);
    expect(retry).toMatchObject({ status: 'running', attempts: 2, epoch: 2 });
    expect(retry!.lastError).toMatch(/lease expired/);

    await h.drain({ now: at(120) });
    expect(await task(id)).toMatchObject({ status: 'succeeded', attempts: 2, epoch: 2 });
    expect(runs.get(id)).toBe(1);
  });

  it('S3 after the side effect, before the finish: at-least-once runs it again under a new epoch', async () => {
    const id = await enqueue();
    await h.sweep({ now: T0 });
    const [m] = h.outbox.take();
    await expect(h.consume([m!.body], { now: T0, faults: crashAt('consume.after_handlers') })).rejects.toThrow(Crash);
    expect(runs.get(id)).toBe(1);
    expect(await task(id)).toMatchObject({ status: 'running', attempts: 1 });

    await h.consume([m!.body], { now: at(1) }); // redelivery: skipped
    expect(runs.get(id)).toBe(1);

    await h.sweep({ now: at(61) });
    await h.drain({ now: at(120) });
    expect(await task(id)).toMatchObject({ status: 'succeeded', attempts: 2, epoch: 2 });
    expect(runs.get(id)).toBe(2);
    await expectOneCompletion(t.db);
  });

  it('S3 under at_most_once: the vanished consumer is never replaced, the task is finished as dead', async () => {
    const id = await enqueue({ delivery: 'at_most_once' });
    await h.sweep({ now: T0 });
    const [m] = h.outbox.take();
    await expect(h.consume([m!.body], { now: T0, faults: crashAt('consume.after_handlers') })).rejects.toThrow(Crash);

    const reap = await h.sweep({ now: at(61) });
    expect(reap.reaped.dead).toBe(1);
    const dead = await task(id);
    expect(dead).toMatchObject({ status: 'dead', attempts: 1 });
    expect(dead!.lastError).toMatch(/at_most_once/);

    await h.drain({ now: at(3600) });
    await h.consume([m!.body], { now: at(3600) });
    expect(runs.get(id)).toBe(1);
    expect(h.outbox.messages).toEqual([]);
  });

  it('at_most_once dispatched but provably never started: back to queued, no attempt spent, never dead; the old message is skipped', async () => {
    const id = await enqueue({ delivery: 'at_most_once' });
    await h.sweep({ now: T0 });
    const [old] = h.outbox.take(); // delayed in transit past its lease
    const reap = await h.sweep({ now: at(901) }); // past the dispatch lease
    expect(reap.reaped).toEqual({ requeued: 1, retried: 0, dead: 0 });
    // Requeued with its attempt refunded, and claimed again by the same sweep.
    expect(await task(id)).toMatchObject({ status: 'running', attempts: 1, epoch: 2, startedAt: null });
    const [fresh] = h.outbox.take();
    expect(fresh!.body).toMatchObject({ id, epoch: 2 });

    // The old message arrives at last: the epoch fence skips it.
    const stale = await h.consume([old!.body], { now: at(902) });
    expect(stale.results).toEqual([]);
    expect(runs.get(id)).toBeUndefined();
    await h.consume([fresh!.body], { now: at(902) });
    expect(await task(id)).toMatchObject({ status: 'succeeded', attempts: 1, epoch: 2 });
    expect(runs.get(id)).toBe(1);
    await expectOneCompletion(t.db);
  });

  it('at_most_once requeued while never started: its old message arriving before the re-claim is skipped too', async () => {
    h = createHarness(t.db, { handlers: [countTask], config: { sweepBatchSize: 1 } });
    const id = await enqueue({ delivery: 'at_most_once' });
    await h.sweep({ now: T0 });
    const [old] = h.outbox.take();
    // Reap only (the queue paused, so nothing is claimed again).
    await t.db.query(`update queues set paused = true where name = 'default'`);
    await h.sweep({ now: at(901) });
    expect(await task(id)).toMatchObject({ status: 'queued', attempts: 0, epoch: 1 });
    const stale = await h.consume([old!.body], { now: at(902) });
    expect(stale.results).toEqual([]);
    expect(runs.get(id)).toBeUndefined();
    expect(await task(id)).toMatchObject({ status: 'queued', attempts: 0 });
  });

  it('at_most_once dead-lettered before its fenced start committed: not dead; the reaper requeues it, attempt unspent', async () => {
    const id = await enqueue({ delivery: 'at_most_once' });
    await h.sweep({ now: T0 });
    const [old] = h.outbox.take();
    // Every delivery failed before the start (the database unreachable) until the Queue dead-lettered the message.
    const dlq = await settleDeadLetters({ db: t.db, log: silentLogger }, [old!.body], { now: at(60) });
    expect(dlq).toMatchObject({ verdicts: ['ack'], settled: [], skipped: 1 });
    expect(await task(id)).toMatchObject({ status: 'running', startedAt: null, finishedAt: null, epoch: 1 });

    const reap = await h.sweep({ now: at(901) });
    expect(reap.reaped).toEqual({ requeued: 1, retried: 0, dead: 0 });
    const [fresh] = h.outbox.take();
    await h.consume([old!.body, fresh!.body], { now: at(902) });
    expect(await task(id)).toMatchObject({ status: 'succeeded', attempts: 1, epoch: 2 });
    expect(runs.get(id)).toBe(1);
    await expectOneCompletion(t.db);
  });

  it('at_most_once dead-lettered after its fenced start: dead, never handed off again', async () => {
    const id = await enqueue({ delivery: 'at_most_once' });
    await h.sweep({ now: T0 });
    const [m] = h.outbox.take();
    await expect(h.consume([m!.body], { now: T0, faults: crashAt('consume.after_start') })).rejects.toThrow(Crash);
    const dlq = await settleDeadLetters({ db: t.db, log: silentLogger }, [m!.body], { now: at(60) });
    expect(dlq.settled).toEqual([{ id, status: 'dead' }]);
    expect(await task(id)).toMatchObject({ status: 'dead', attempts: 1 });
    await h.drain({ now: at(3600) });
    expect(h.outbox.messages).toEqual([]);
  });

  it('after the finish, before the acknowledgement: the redelivered message changes nothing', async () => {
    const id = await enqueue();
    await h.sweep({ now: T0 });
    const [m] = h.outbox.take();
    await expect(h.consume([m!.body], { now: T0, faults: crashAt('consume.after_finish') })).rejects.toThrow(Crash);
    expect(await task(id)).toMatchObject({ status: 'succeeded', attempts: 1 });

    const again = await h.consume([m!.body], { now: at(1) });
    expect(again.verdicts).toEqual(['ack']);
    expect(again.results).toEqual([]);
    expect(runs.get(id)).toBe(1);
    await expectOneCompletion(t.db);
  });
});
