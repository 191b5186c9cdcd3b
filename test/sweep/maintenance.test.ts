// The sweep's maintenance steps and bounds: the reaper's decisions, retention,
// the time budget, and batch bounds (I9).
import { beforeEach, describe, expect, it } from 'vitest';
import { countStatements } from '../../src/db/seam.ts';
import { purgeIdleFlowControl } from '../../src/db/sql/concurrency.ts';
import { getTask } from '../../src/db/sql/tasks-read.ts';
import { sweepOnce } from '../../src/sweep/sweep.ts';
import { silentLogger } from '../../src/log.ts';
import { useTestDatabase, resetTables, T0, at, holdLocks } from '../helpers/db.ts';
import { Crash, crashAt } from '../helpers/faults.ts';
import { claimsCounted, createHarness, createOutbox, type Harness } from '../helpers/harness.ts';

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

describe('idle flow-control keys (issue 16)', () => {
  const slotKeys = async () =>
    (await t.db.query<{ key: string; max_running: number }>(`select key, max_running from concurrency_slots order by key`)).map(
      (r) => `${r.key}:${r.max_running}`,
    );
  const rateKeys = async () =>
    (
      await t.db.query<{ key: string }>(
        `select 'claim:' || key as key from rate_limits union all select 'start:' || key from rate_start_lines order by key`,
      )
    ).map((r) => r.key);
  const frees = async () => (await t.db.query<{ n: number }>(`select count(*)::int as n from concurrency_frees`))[0]!.n;

  it("forgets a key's slot row and frees once none of its tasks is left, and a rate key's lines once past by the retention", async () => {
    h = createHarness(t.db, { config: { retentionSeconds: 60 } });
    await h.enqueue(Array.from({ length: 3 }, () => ({ task: 'noop', concurrency: { key: 'k', limit: 2 } })), { now: T0 });
    // A task of another key waits a day: its key stays, whatever its count says.
    await h.enqueue({ task: 'noop', delay: 86_400, concurrency: { key: 'later', limit: 1 } }, { now: T0 });
    // One start per 600 s: the line stands 600 s after the start.
    await h.enqueue({ task: 'noop', rateLimit: { key: 'r', limit: 1, periodSeconds: 600 } }, { now: T0 });
    for (let i = 0; i < 3; i++) await h.drain({ now: at(i) });
    expect(await slotKeys()).toEqual(['k:2', 'later:1']);
    expect(await frees()).toBeGreaterThan(0);

    // Finished tasks of the key are still kept (retention): nothing asks about the key yet.
    expect((await h.sweep({ now: at(30) })).flowKeysPurged).toEqual({ slots: 0, rates: 0 });
    expect(await slotKeys()).toEqual(['k:2', 'later:1']);

    // The purge deletes the key's last tasks, then the key, in one sweep.
    const purged = await h.sweep({ now: at(120) });
    expect(purged.purged).toBe(4);
    expect(purged.flowKeysPurged).toEqual({ slots: 1, rates: 0 });
    expect(await slotKeys()).toEqual(['later:1']);
    expect(await frees()).toBe(0);
    // The rate line (600 s) is not yet past by the retention (60 s).
    expect(await rateKeys()).toEqual(['claim:r', 'start:r']);
    expect(await purgeIdleFlowControl(t.db, { now: at(650), retentionSeconds: 60, limit: 100, keys: [] })).toEqual({ slots: 0, rates: 0 });
    expect(await rateKeys()).toEqual(['claim:r', 'start:r']);
    expect((await h.sweep({ now: at(661) })).flowKeysPurged.rates).toBe(1);
    expect(await rateKeys()).toEqual([]);

    // The key's next task sets its limit afresh, and the limit holds.
    await h.enqueue(Array.from({ length: 3 }, () => ({ task: 'noop', concurrency: { key: 'k', limit: 1 } })), { now: at(700) });
    expect(await slotKeys()).toEqual(['k:1', 'later:1']);
    expect((await h.sweep({ now: at(700) })).claimed).toBe(1);
  });

  it("keeps a key's slot row while a task of the key is left, though the purge deleted the key's others", async () => {
    h = createHarness(t.db, { config: { retentionSeconds: 60 } });
    await h.enqueue({ task: 'noop', concurrency: { key: 'k', limit: 2 } }, { now: T0 });
    await h.enqueue({ task: 'noop', delay: 86_400, concurrency: { key: 'k', limit: 2 } }, { now: T0 });
    await h.drain({ now: T0 });
    const swept = await h.sweep({ now: at(120) });
    expect(swept.purged).toBe(1);
    expect(swept.flowKeysPurged).toEqual({ slots: 0, rates: 0 });
    expect(await slotKeys()).toEqual(['k:2']);
  });

  it("keeps a key's slot row while a task of the key holds a slot, though nothing of it waits and the purge deleted the key's others", async () => {
    h = createHarness(t.db, { config: { retentionSeconds: 60 } });
    await h.enqueue({ task: 'noop', concurrency: { key: 'k', limit: 1 } }, { now: T0 });
    await h.drain({ now: T0 });
    // The key's next task holds its slot (claimed and sent; its message is held here).
    await h.enqueue({ task: 'noop', concurrency: { key: 'k', limit: 1 } }, { now: at(50) });
    expect((await h.sweep({ now: at(50) })).purged).toBe(0);
    const [long] = h.outbox.take();
    const swept = await h.sweep({ now: at(120) });
    expect(swept.purged).toBe(1);
    expect(swept.flowKeysPurged).toEqual({ slots: 0, rates: 0 });
    expect(await slotKeys()).toEqual(['k:1']);
    // The limit still holds: a third task waits for the running one.
    await h.enqueue({ task: 'noop', concurrency: { key: 'k', limit: 1 } }, { now: at(121) });
    expect((await h.sweep({ now: at(121) })).claimed).toBe(0);
    await h.consume([long!.body], { now: at(122) });
    expect((await h.sweep({ now: at(122) })).claimed).toBe(1);
  });

  it('skips what others hold: a slot row or a rate line a claim or start has locked, and a key whose free a claim has taken', async () => {
    h = createHarness(t.db, { config: { retentionSeconds: 60 } });
    await h.enqueue({ task: 'noop', concurrency: { key: 'a', limit: 1 } }, { now: T0 });
    await h.enqueue({ task: 'noop', concurrency: { key: 'b', limit: 1 } }, { now: T0 });
    await h.enqueue({ task: 'noop', rateLimit: { key: 'r', limit: 1, periodSeconds: 1 } }, { now: T0 });
    await h.drain({ now: T0 });
    await h.sweep({ now: at(120) }); // deletes the tasks (and the keys: made again below)
    await t.db.query(`insert into concurrency_slots (tenant, key, max_running, running) values ('acme', 'a', 1, 1), ('acme', 'b', 1, 1)`);
    await t.db.query(`insert into concurrency_frees (tenant, key, n) values ('acme', 'a', 1), ('acme', 'b', 1)`);
    await t.db.query(`insert into rate_limits (tenant, key, max_starts, period_seconds) values ('acme', 'r', 1, 1)`);
    await t.db.query(`insert into rate_start_lines (tenant, key) values ('acme', 'r')`);

    const release = await holdLocks(t, [
      [`select 1 from concurrency_slots where key = 'a' for update`],
      [`select 1 from concurrency_frees where key = 'b' for update`],
      [`select 1 from rate_limits where key = 'r' for update`],
      [`select 1 from rate_start_lines where key = 'r' for update`],
    ]);
    const keys = ['a', 'b'].map((key) => ({ tenant: 'acme', key }));
    const purge = (now: Date) => purgeIdleFlowControl(t.db, { now, retentionSeconds: 60, limit: 100, keys });
    const during = await purge(at(240));
    await release();
    expect(during).toEqual({ slots: 0, rates: 0 });
    expect(await slotKeys()).toEqual(['a:1', 'b:1']);
    expect(await frees()).toBe(2);
    expect(await rateKeys()).toEqual(['claim:r', 'start:r']);
    // Once nobody holds them: both keys and their frees go, and both lines.
    expect(await purge(at(300))).toEqual({ slots: 2, rates: 1 });
    expect(await frees()).toBe(0);
    expect(await rateKeys()).toEqual([]);
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
    expect(claimsCounted(counted.counts.byName)).toBeGreaterThanOrEqual(batchSizes.length);
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
    const claims = claimsCounted(counted.counts.byName);
    const { tasks_claim_runnable: _whole, tasks_claim_runnable_plain: _plain, ...sweepCounts } = counted.counts.byName;
    expect(sizes).toEqual([100, 100, 50]);
    counted.reset();
    const bodies = outbox.take().map((m) => m.body);
    for (let i = 0; i < bodies.length; i += 100) await hc.consume(bodies.slice(i, i + 100), { now: T0 });
    // One start and one finish per Queue batch of up to 100.
    expect(counted.counts.byName).toEqual({ tasks_start_if_claimed_unrated: 3, tasks_finish_if_running: 3 });
    // the probe (issue 13), reap, due schedules, promote, wake parked tasks of keys
    // with room (issue 16), list queues, one claim of 250 (less than the batch of
    // 500, but a backlog: at least one sendBatch's worth) and one that finds the
    // queue empty, one mark, purge (tasks, then idle flow-control keys: the
    // slot rows only for keys of deleted tasks, none here)
    expect(sweepCounts).toEqual({
      sweep_probe_due_work: 1,
      tasks_reap_expired: 1,
      schedules_lock_due: 1,
      tasks_promote_due: 1,
      tasks_wake_parked: 1,
      queues_list_claimable: 1,
      dispatch_marks_insert: 1,
      tasks_purge_finished: 1,
      flow_control_purge_idle: 1,
    });
    expect(claims).toBe(2);
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
