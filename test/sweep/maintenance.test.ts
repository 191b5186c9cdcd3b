// The sweep's maintenance steps and bounds: the reaper's decisions, retention,
// the time budget, and batch bounds (I9).
import { beforeEach, describe, expect, it } from 'vitest';
import { countStatements } from '../../src/db/seam.ts';
import { getTask } from '../../src/db/sql/tasks-read.ts';
import { sweepOnce } from '../../src/sweep/sweep.ts';
import { silentLogger } from '../../src/log.ts';
import { useTestDatabase, resetTables, T0, at } from '../helpers/db.ts';
import { Crash, crashAt } from '../helpers/faults.ts';
import { createHarness, createOutbox, type Harness } from '../helpers/harness.ts';

const t = useTestDatabase();
let h: Harness;

beforeEach(async () => {
  await resetTables(t.db);
  h = createHarness(t.db);
});

describe('retention', () => {
  it('deletes terminal tasks older than the retention, in bounded batches, and keeps younger and live ones', async () => {
    h = createHarness(t.db, { config: { purgeBatchSize: 40, retentionSeconds: 86_400 } });
    await h.enqueue(Array.from({ length: 100 }, (_, i) => ({ task: 'noop', idempotencyKey: `old-${i}` })), { now: T0 });
    await h.drain({ now: T0 });
    await h.enqueue(Array.from({ length: 10 }, () => ({ task: 'noop' })), { now: at(86_000) });
    await h.drain({ now: at(86_000) });
    await h.enqueue({ task: 'noop', delay: 30 * 86_400 }, { now: T0 }); // still waiting

    const day = at(86_401);
    const purged: number[] = [];
    for (let i = 0; i < 4; i++) purged.push((await h.sweep({ now: day })).purged);
    expect(purged).toEqual([40, 40, 20, 0]);
    const left = await t.db.query<{ status: string; n: number }>(`select status, count(*)::int as n from tasks group by status order by status`);
    expect(left).toEqual([
      { status: 'scheduled', n: 1 },
      { status: 'succeeded', n: 10 },
    ]);
    const keys = await t.db.query<{ n: number }>('select count(*)::int as n from spent_idempotency_keys');
    expect(keys[0]!.n).toBe(100);
  });

  it('forgets spent keys after their own retention, when one is set', async () => {
    h = createHarness(t.db, { config: { retentionSeconds: 60, spentKeyRetentionSeconds: 3600 } });
    await h.enqueue({ task: 'noop', idempotencyKey: 'k' }, { now: T0 });
    await h.drain({ now: T0 });
    expect((await h.sweep({ now: at(120) })).purged).toBe(1);
    expect((await h.sweep({ now: at(1800) })).spentKeysPurged).toBe(0);
    expect((await h.sweep({ now: at(3721) })).spentKeysPurged).toBe(1);
    const [again] = await h.enqueue({ task: 'noop', idempotencyKey: 'k' }, { now: at(3722) });
    expect(again!.outcome).toBe('created');
  });
});

describe('the reaper', () => {
  it('decides by dispatch state, delivery and attempts left', async () => {
    h = createHarness(t.db, { config: { claimLeaseSeconds: 60, dispatchLeaseSeconds: 300 } });
    const [unsent] = await h.enqueue({ task: 'noop', queue: 'unsent' }, { now: T0 });
    await expect(h.sweep({ now: T0, faults: crashAt('sweep.after_claim') })).rejects.toThrow(Crash);
    const vtime = (await t.db.query<{ vtime: number }>('select vtime from tasks where id = $1', [unsent!.task!.id]))[0]!.vtime;

    const [retry] = await h.enqueue({ task: 'noop', queue: 'sent' }, { now: T0 });
    const [spent] = await h.enqueue({ task: 'noop', queue: 'sent', maxAttempts: 1 }, { now: T0 });
    const [once] = await h.enqueue({ task: 'noop', queue: 'sent', delivery: 'at_most_once' }, { now: T0 });
    await h.sweep({ now: T0 });
    h.outbox.take(); // every message is lost

    const counts = await h.sweep({ now: at(301) });
    // The at-most-once one never started: requeued (no attempt spent), not dead.
    expect(counts.reaped).toEqual({ requeued: 2, retried: 1, dead: 1 });
    // The unsent one went back to queued with its vtime, attempt refunded, and
    // this same sweep claimed it again under epoch 2.
    expect(await getTask(t.db, 'acme', unsent!.task!.id)).toMatchObject({ status: 'running', attempts: 1, epoch: 2 });
    const vtimeAfter = (await t.db.query<{ vtime: number }>('select vtime from tasks where id = $1', [unsent!.task!.id]))[0]!.vtime;
    expect(vtimeAfter).toBe(vtime);
    expect(await getTask(t.db, 'acme', retry!.task!.id)).toMatchObject({ attempts: 2, epoch: 2 });
    expect(await getTask(t.db, 'acme', spent!.task!.id)).toMatchObject({ status: 'dead', attempts: 1 });
    expect(await getTask(t.db, 'acme', once!.task!.id)).toMatchObject({ status: 'running', attempts: 1, epoch: 2 });
  });
});

describe('bounds', () => {
  it('a sweep cut short by its time budget leaves the rest to the next sweep, never more than a batch per claim', async () => {
    await h.enqueue(Array.from({ length: 250 }, () => ({ task: 'noop' })), { now: T0 });
    const outbox = createOutbox();
    const batchSizes: number[] = [];
    const sender = {
      sendBatch: async (msgs: Iterable<{ body: never }>) => {
        const list = [...msgs];
        batchSizes.push(list.length);
        return outbox.sendBatch(list);
      },
    };
    const counted = countStatements(t.db);
    let clock = 0;
    const deps = {
      db: counted.db,
      config: { ...h.config, sweepBatchSize: 40, sweepTimeBudgetMs: 100 },
      sender,
      log: silentLogger,
      workerId: 'budget',
      elapsed: () => (clock += 15), // every check costs 15 ms of budget
    };
    const first = await sweepOnce(deps, { now: T0 });
    expect(first.budgetExhausted).toBe(true);
    expect(first.claimed).toBeGreaterThan(0);
    expect(first.claimed).toBeLessThan(250);
    let total = first.claimed;
    for (let i = 0; i < 20 && total < 250; i++) {
      clock = 0;
      total += (await sweepOnce(deps, { now: T0 })).claimed;
    }
    expect(total).toBe(250);
    expect(new Set(outbox.messages.map((m) => m.body.id)).size).toBe(250);
    expect(Math.max(...batchSizes)).toBeLessThanOrEqual(40);
    // One claim statement and one dispatched mark per batch sent.
    expect(counted.counts.byName.tasks_claim_runnable).toBeGreaterThanOrEqual(batchSizes.length);
    expect(counted.counts.byName.dispatch_marks_insert).toBe(batchSizes.length);
  });

  it('costs a fixed number of statements per batch, whatever its size, sending in chunks of 100', async () => {
    await h.enqueue(Array.from({ length: 250 }, () => ({ task: 'noop' })), { now: T0 });
    const counted = countStatements(t.db);
    const sizes: number[] = [];
    const outbox = createOutbox();
    const sender = {
      sendBatch: async (msgs: Iterable<{ body: never }>) => {
        const list = [...msgs];
        sizes.push(list.length);
        return outbox.sendBatch(list);
      },
    };
    const hc = createHarness(counted.db, { config: { sweepBatchSize: 500 } });
    await hc.sweep({ now: T0, sender });
    const sweepCounts = { ...counted.counts.byName };
    expect(sizes).toEqual([100, 100, 50]);
    counted.reset();
    const bodies = outbox.take().map((m) => m.body);
    for (let i = 0; i < bodies.length; i += 100) await hc.consume(bodies.slice(i, i + 100), { now: T0 });
    // One start and one finish per Queue batch of up to 100.
    expect(counted.counts.byName).toEqual({ tasks_start_if_claimed: 3, tasks_finish_if_running: 3 });
    // the probe (issue 13), reap, due schedules, promote, wake parked tasks of keys
    // with room (issue 16), list queues, one claim of 250 (< the batch of 500), one mark, purge
    expect(sweepCounts).toEqual({
      sweep_probe_due_work: 1,
      tasks_reap_expired: 1,
      schedules_lock_due: 1,
      tasks_promote_due: 1,
      tasks_wake_parked: 1,
      queues_list_claimable: 1,
      tasks_claim_runnable: 1,
      dispatch_marks_insert: 1,
      tasks_purge_finished: 1,
    });
  });
});

describe('idle cost (issue 13)', () => {
  it('when nothing is due, a sweep costs one statement; due work makes it run its steps', async () => {
    const counted = countStatements(t.db);
    const hc = createHarness(counted.db, { config: { retentionSeconds: 3600 } });
    const sweepAt = async (now: Date) => {
      counted.reset();
      const c = await hc.sweep({ now, pumps: true });
      return { idle: c.idle, statements: counted.counts.roundTrips, claimed: c.claimed, purged: c.purged };
    };
    expect(await sweepAt(T0)).toEqual({ idle: true, statements: 1, claimed: 0, purged: 0 });
    // A task finished at T0 (kept an hour), another due in an hour.
    await hc.enqueue({ task: 'noop' }, { now: T0 });
    await hc.drain({ now: T0 });
    await hc.enqueue({ task: 'noop', delay: 3600 }, { now: T0 });
    expect(await sweepAt(at(60))).toEqual({ idle: true, statements: 1, claimed: 0, purged: 0 });
    // Within the look-ahead of the second: every step runs, it is claimed.
    expect(await sweepAt(at(3541))).toMatchObject({ idle: false, claimed: 1, purged: 0 });
    await hc.consume(hc.outbox.take().map((m) => m.body), { now: at(3600) });
    // Past the first one's retention: the purge is due.
    expect(await sweepAt(at(3601))).toMatchObject({ idle: false, purged: 1 });
    expect(await sweepAt(at(3602))).toEqual({ idle: true, statements: 1, claimed: 0, purged: 0 });
  });
});

describe('S10: the database clock jumping', () => {
  it('forward then back: leases and run times keep every task single-dispatched and finishable', async () => {
    const [r] = await h.enqueue({ task: 'noop' }, { now: T0 });
    // Jump an hour forward: claimed with a lease relative to that clock.
    await h.sweep({ now: at(3600) });
    const [m] = h.outbox.take();
    // Back to T0: the lease is not expired on this clock, nothing is re-claimed.
    const back = await h.sweep({ now: T0 });
    expect(back.reaped).toEqual({ requeued: 0, retried: 0, dead: 0 });
    expect(back.claimed).toBe(0);
    await h.consume([m!.body], { now: T0 });
    expect(await getTask(t.db, 'acme', r!.task!.id)).toMatchObject({ status: 'succeeded', attempts: 1, epoch: 1 });
    // And forward again: nothing left to do.
    const fwd = await h.sweep({ now: at(7200) });
    expect(fwd.claimed + fwd.reaped.requeued + fwd.reaped.retried + fwd.reaped.dead).toBe(0);
  });
});
