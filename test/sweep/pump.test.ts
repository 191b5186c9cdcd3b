// Continuous, parallel dispatch (issue 13): a sweep meeting a backlog fans
// out to pumps, pumps re-arm while it lasts, at most MAX_DISPATCHERS hold a
// slot at once, a dispatcher cut off at any step leaves nothing the reaper
// and the next dispatcher cannot finish, and the fair order holds with four
// dispatchers claiming at once.
import { beforeEach, describe, expect, it } from 'vitest';
import type { Config } from '../../src/config.ts';
import { acquireDispatcherSlot, releaseDispatcherSlot } from '../../src/db/sql/dispatchers.ts';
import { setTenantWeight } from '../../src/db/sql/tenants.ts';
import type { FaultPoint, Faults } from '../../src/faults.ts';
import type { TaskMessage, TaskSender } from '../../src/queue/messages.ts';
import type { DispatcherCounts } from '../../src/sweep/sweep.ts';
import { at, resetTables, T0, useTestDatabase } from '../helpers/db.ts';
import { Crash, crashAt } from '../helpers/faults.ts';
import { countingTask, createHarness, type Harness } from '../helpers/harness.ts';
import { expectNoLoss, expectOneCompletion } from '../helpers/invariants.ts';

const t = useTestDatabase();
const { task: countTask, runs } = countingTask();

beforeEach(async () => {
  await resetTables(t.db);
  runs.clear();
});

const harness = (config: Partial<Config> = {}) =>
  createHarness(t.db, { handlers: [countTask], config: { sweepBatchSize: 10, maxDispatchers: 4, ...config } });

async function backlog(h: Harness, n: number, o: { tenant?: string; queue?: string } = {}): Promise<string[]> {
  const ids: string[] = [];
  for (let i = 0; i < n; i += 1000) {
    const written = await h.enqueue(
      Array.from({ length: Math.min(1000, n - i) }, () => ({ task: 'count', queue: o.queue ?? 'default' })),
      { now: T0, tenant: o.tenant ?? 'acme' },
    );
    ids.push(...written.map((r) => r.task!.id));
  }
  return ids;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Runs sweeps (with pumps), every pump they ask for, and the consumer, until nothing is left to send. */
async function settle(h: Harness, now: Date): Promise<void> {
  for (let round = 0; round < 50; round++) {
    await h.sweep({ now, pumps: true });
    while (h.pumpbox.take().length > 0) await h.pump({ now });
    const sent = h.outbox.take();
    if (sent.length === 0) return;
    await h.consume(sent.map((m) => m.body), { now });
  }
}

async function expectAllRanOnce(ids: readonly string[], now: Date) {
  await expectNoLoss(t.db, now);
  await expectOneCompletion(t.db);
  const done = await t.db.query<{ n: number }>(`select count(*)::int as n from tasks where status = 'succeeded'`);
  expect(done[0]!.n).toBe(ids.length);
  expect(ids.filter((id) => runs.get(id) !== 1)).toEqual([]);
}

describe('fan-out and re-arm', () => {
  it('a sweep meeting a backlog asks for MAX_DISPATCHERS - 1 pumps, re-arms when cut off, and pumps carry on until it is gone', async () => {
    const h = harness({ sweepTimeBudgetMs: 1000, pumpTimeBudgetMs: 100 });
    const ids = await backlog(h, 300);
    // Each send costs 50 ms of the budget's clock: the sweep's dispatch share sends ~7 batches.
    let clock = 0;
    const sender: TaskSender = { sendBatch: async (b) => ((clock += 50), h.outbox.sendBatch(b)) };
    const swept = await h.sweep({ now: T0, pumps: true, sender, elapsed: () => clock });
    expect(swept.claimed).toBeGreaterThan(0);
    expect(swept.claimed).toBeLessThan(300);
    // Three for the fan-out after the first full pass, one re-arm at the deadline.
    expect(swept.pumps).toBe(4);
    expect(h.pumpbox.messages).toEqual(Array(4).fill({ kind: 'pump' }));

    let rounds = 0;
    let parallel = 0;
    for (let pending = h.pumpbox.take().length; pending > 0; pending = h.pumpbox.take().length) {
      rounds += 1;
      const counts = await Promise.all(Array.from({ length: pending }, () => h.pump({ now: T0, sender, elapsed: () => clock })));
      parallel = Math.max(parallel, counts.filter((c) => c.slot !== null).length);
      expect(counts.filter((c) => c.rearmed).length).toBeLessThanOrEqual(4);
    }
    expect(rounds).toBeGreaterThan(1); // pumps re-armed while the backlog lasted
    expect(parallel).toBeGreaterThanOrEqual(2);
    const sent = h.outbox.take();
    expect(new Set(sent.map((m) => m.body.id)).size).toBe(300);
    expect(sent).toHaveLength(300);
    await h.consume(sent.map((m) => m.body), { now: T0 });
    await expectAllRanOnce(ids, T0);
    // Nothing due: no fan-out.
    expect((await h.sweep({ now: at(1), pumps: true })).pumps).toBe(0);
  });

  it('with claims of 500, a pump carries on while each claim finds at least a sendBatch (100): work arriving meanwhile goes out in the same run', async () => {
    const h = harness({ sweepBatchSize: 500, pumpTimeBudgetMs: 60_000 });
    const first = await backlog(h, 150);
    const later: string[] = [];
    // 150 more arrive while the pump sends its first claim (a steady stream: no claim fills 500).
    let arriving: Promise<void> | undefined;
    const sender: TaskSender = {
      async sendBatch(messages) {
        arriving ??= backlog(h, 150).then((ids) => void later.push(...ids));
        await arriving;
        return h.outbox.sendBatch(messages);
      },
    };
    const pumped = await h.pump({ now: T0, sender });
    expect(pumped).toMatchObject({ claimed: 300, dispatched: 300 });
    expect(new Set(h.outbox.take().map((m) => (m.body as TaskMessage).id))).toEqual(new Set([...first, ...later]));
    // What a claim finds below a sendBatch is no backlog: the pump stops there.
    await backlog(h, 99);
    expect(await h.pump({ now: T0 })).toMatchObject({ claimed: 99 });
  });

  it('a sweep whose batches do not fill sends no pump', async () => {
    const h = harness();
    await backlog(h, 9);
    const swept = await h.sweep({ now: T0, pumps: true });
    expect(swept).toMatchObject({ claimed: 9, pumps: 0 });
    expect(h.pumpbox.messages).toEqual([]);
  });
});

describe('the dispatcher cap', () => {
  it('is never exceeded: ten pumps at once over 3,000 tasks, at most 3 dispatching', async () => {
    const h = harness({ maxDispatchers: 3, sweepBatchSize: 20, pumpTimeBudgetMs: 60_000 });
    const ids = await backlog(h, 3000);
    let holding = 0;
    let most = 0;
    const faults: Faults = (p) => {
      if (p === 'dispatcher.after_acquire') most = Math.max(most, ++holding);
      else if (p === 'dispatcher.before_release') holding -= 1;
    };
    // A send takes a few milliseconds, so dispatchers overlap.
    const sender: TaskSender = { sendBatch: async (b) => (await sleep(2), h.outbox.sendBatch(b)) };
    const counts: DispatcherCounts[] = await Promise.all(
      Array.from({ length: 10 }, (_, i) => sleep(i).then(() => h.pump({ now: T0, sender, faults }))),
    );
    expect(most).toBeLessThanOrEqual(3);
    expect(most).toBeGreaterThanOrEqual(2);
    expect(counts.filter((c) => c.slot === null).length).toBeGreaterThanOrEqual(5);
    const sent = h.outbox.take();
    expect(sent).toHaveLength(3000);
    expect(new Set(sent.map((m) => m.body.id)).size).toBe(3000);
    await h.consume(sent.map((m) => m.body), { now: T0 });
    await expectAllRanOnce(ids, T0);
  });

  it('a slot is taken over only after its lease, and a late holder cannot give back what is no longer its own', async () => {
    const take = (holder: string, now: Date) => acquireDispatcherSlot(t.db, { now, max: 1, holder, leaseSeconds: 30 });
    const a = await take('a', T0);
    expect(a?.slot).toBe(0);
    expect(await take('b', at(10))).toBeNull();
    const b = await take('b', at(31)); // a's lease ran out: a is presumed dead
    expect(b?.slot).toBe(0);
    expect(await releaseDispatcherSlot(t.db, a!)).toBe(false); // a was only slow
    expect(await take('c', at(32))).toBeNull(); // b still holds it
    expect(await releaseDispatcherSlot(t.db, b!)).toBe(true);
    expect((await take('c', at(33)))?.slot).toBe(0);
  });
});

describe('a dispatcher cut off at every step', () => {
  const points: FaultPoint[] = [
    'dispatcher.after_acquire',
    'sweep.after_claim',
    'sweep.after_send',
    'dispatcher.before_release',
    'dispatcher.after_release',
  ];
  it.each(points)('killed at %s: its slot frees when its lease runs out, the reaper and the next dispatcher finish its work', async (point) => {
    const h = harness({ maxDispatchers: 1 });
    const ids = await backlog(h, 25);
    // The invocation dies at `point`: it never runs another line.
    let reached!: () => void;
    const died = new Promise<void>((r) => (reached = r));
    const kill: Faults = (p) => {
      if (p !== point) return;
      reached();
      return new Promise<void>(() => {});
    };
    // Its budget's clock allows two batches of 10 (5 tasks are left over when it gets that far).
    let tick = 0;
    void h.pump({ now: T0, faults: kill, elapsed: () => tick++ });
    await died;
    h.pumpbox.take();

    const other = await h.pump({ now: at(1) });
    if (point === 'dispatcher.after_release') expect(other.slot).toBe(0);
    else expect(other).toMatchObject({ slot: null, claimed: 0 });
    // What it sent is delivered and runs.
    await h.consume(h.outbox.take().map((m) => m.body), { now: at(1) });

    // Past its slot's lease and the claim lease: the next sweep reaps, a dispatcher finishes.
    await settle(h, at(120));
    await expectAllRanOnce(ids, at(120));
    const held = await t.db.query<{ n: number }>(`select count(*)::int as n from dispatcher_slots where expires_at > $1::timestamptz`, [at(120)]);
    expect(held[0]!.n).toBe(0);
  });

  it('a send failing under a pump gives back its claims and its slot at once', async () => {
    const h = harness({ maxDispatchers: 1 });
    const ids = await backlog(h, 25);
    await expect(h.pump({ now: T0, faults: crashAt('sweep.after_claim') })).rejects.toThrow(Crash);
    const failing: TaskSender = {
      sendBatch: async () => {
        throw new Error('queue unavailable');
      },
    };
    await expect(h.pump({ now: T0, sender: failing })).rejects.toThrow('queue unavailable');
    // The slot is free again at once (no lease to wait out); the released claims go out now.
    const next = await h.pump({ now: at(1) });
    expect(next.slot).toBe(0);
    expect(next.claimed).toBe(15); // the first pump's 10 wait for their claim lease (it did not reach the release)
    await h.consume(h.outbox.take().map((m) => m.body), { now: at(1) });
    await settle(h, at(120));
    await expectAllRanOnce(ids, at(120));
  });
});

describe('fairness under parallel dispatch', () => {
  it('A (10,000, w1), B (1,000, w3), C (100, w1) under 4 concurrent dispatchers: shares within 2 points of the weights', async () => {
    const h = harness({ sweepBatchSize: 25, pumpTimeBudgetMs: 600_000 });
    await setTenantWeight(t.db, { queue: 'fair', tenant: 'B', weight: 3 });
    const tenantOf = new Map<string, string>();
    for (const [tenant, n] of [['A', 10_000], ['B', 1_000], ['C', 100]] as const) {
      for (const id of await backlog(h, n, { tenant, queue: 'fair' })) tenantOf.set(id, tenant);
    }
    // The order of the claims, as each returns, across four dispatchers claiming and sending at once.
    const order: string[] = [];
    const sent = new Set<string>();
    const sender: TaskSender = {
      sendBatch: async (b) => {
        await sleep(1);
        for (const m of b) sent.add((m.body as TaskMessage).id);
      },
    };
    let holding = 0;
    let most = 0;
    const faults: Faults = (p, detail) => {
      if (p === 'dispatcher.after_acquire') most = Math.max(most, ++holding);
      else if (p === 'dispatcher.before_release') holding -= 1;
      else if (p === 'sweep.after_claim') for (const id of detail!.ids as string[]) order.push(tenantOf.get(id)!);
    };
    await Promise.all(Array.from({ length: 4 }, () => h.pump({ now: T0, sender, faults })));
    expect(most).toBe(4);
    expect(order).toHaveLength(11_100);
    expect(sent.size).toBe(11_100);
    const lastOf = (tenant: string) => order.lastIndexOf(tenant);
    const window = Math.min(lastOf('A'), lastOf('B'), lastOf('C')) + 1;
    const share = (tenant: string) => order.slice(0, window).filter((x) => x === tenant).length / window;
    expect(Math.abs(share('A') - 1 / 5)).toBeLessThanOrEqual(0.02);
    expect(Math.abs(share('B') - 3 / 5)).toBeLessThanOrEqual(0.02);
    expect(Math.abs(share('C') - 1 / 5)).toBeLessThanOrEqual(0.02);
    // C's last task waits for about its start tag's worth of others (SFQ), plus the batches in flight beside it.
    expect(lastOf('C') + 1).toBeLessThanOrEqual(500 + 3 * 25);
  }, 60_000);
});
