// Weighted fair queuing (DESIGN §7): under a shared backlog each tenant's
// share of claims follows its weight, the small tenant waits no longer than
// start-time fair queuing allows, and an idle tenant earns no burst.
import { beforeEach, describe, expect, it } from 'vitest';
import { claimTasks } from '../../src/db/sql/tasks-dispatch.ts';
import { setQueuePaused, setTenantWeight } from '../../src/db/sql/tenants.ts';
import { T0, useTestDatabase, resetTables } from '../helpers/db.ts';
import { createHarness, type Harness } from '../helpers/harness.ts';
import { createTestApi } from '../helpers/http.ts';

const t = useTestDatabase();
let h: Harness;

beforeEach(async () => {
  await resetTables(t.db);
  h = createHarness(t.db);
});

/** Claims everything runnable in `queue`, batch by batch; returns the tenants in claim order. */
async function claimOrder(queue: string, limit = 100, max = Infinity): Promise<string[]> {
  const order: string[] = [];
  for (;;) {
    const { claimed } = await claimTasks(t.db, { now: T0, queue, limit, claimedBy: 'fairness', leaseSeconds: 60 });
    if (claimed.length === 0 || order.length >= max) return order;
    const rows = await t.db.query<{ id: string; tenant: string }>('select id, tenant from tasks where id = any($1::bigint[])', [
      claimed.map((c) => c.id),
    ]);
    const tenantOf = new Map(rows.map((r) => [String(r.id), r.tenant]));
    order.push(...claimed.map((c) => tenantOf.get(c.id)!));
  }
}

async function backlog(tenant: string, n: number, queue = 'fair') {
  for (let i = 0; i < n; i += 1000) {
    await h.enqueue(Array.from({ length: Math.min(1000, n - i) }, () => ({ task: 'noop', queue })), { now: T0, tenant });
  }
}

describe('weighted fair queuing', () => {
  it('A (10,000, w1), B (1,000, w3), C (100, w1): shares follow the weights while all have work', async () => {
    await setTenantWeight(t.db, { queue: 'fair', tenant: 'B', weight: 3 });
    await backlog('A', 10_000);
    await backlog('B', 1_000);
    await backlog('C', 100);

    const order = await claimOrder('fair');
    expect(order).toHaveLength(11_100);
    // The window while all three still have work: up to the first tenant's last claim.
    const lastOf = (tenant: string) => order.lastIndexOf(tenant);
    const window = Math.min(lastOf('A'), lastOf('B'), lastOf('C')) + 1;
    const share = (tenant: string) => order.slice(0, window).filter((x) => x === tenant).length / window;
    expect(Math.abs(share('A') - 1 / 5)).toBeLessThanOrEqual(0.02);
    expect(Math.abs(share('B') - 3 / 5)).toBeLessThanOrEqual(0.02);
    expect(Math.abs(share('C') - 1 / 5)).toBeLessThanOrEqual(0.02);
    // SFQ bound: C's last task (start tag 100) waits only for tasks with a
    // start tag at most 100: 100 of A, 300 of B, and C's own 100.
    expect(lastOf('C') + 1).toBeLessThanOrEqual(500);
  });

  it('a tenant idle while the queue clock moved on gets no burst when it comes back', async () => {
    await backlog('C', 10); // C's last_vtime stops at 10
    await backlog('A', 3000);
    await claimOrder('fair', 100, 1500); // the queue clock moves far past C's last_vtime
    await backlog('C', 500); // C returns after "an hour"

    const next = await claimOrder('fair', 100, 200);
    const firstBatch = next.slice(0, 100);
    // Equal weights: C gets its half of a batch, not the 100 a stale
    // last_vtime would have given it.
    expect(firstBatch.filter((x) => x === 'C').length).toBeLessThanOrEqual(51);
    expect(firstBatch.filter((x) => x === 'C').length).toBeGreaterThanOrEqual(49);
  });

  it('tenants of different queues never share a clock', async () => {
    await backlog('A', 200, 'q1');
    await backlog('B', 50, 'q2');
    expect(await claimOrder('q2')).toEqual(Array(50).fill('B'));
    expect(await claimOrder('q1')).toEqual(Array(200).fill('A'));
  });
});

describe('paused queues', () => {
  it('are never claimed, and keep their order for when they resume', async () => {
    await backlog('A', 5, 'held');
    await backlog('B', 5, 'held');
    await setQueuePaused(t.db, { queue: 'held', paused: true });
    const swept = await h.sweep({ now: T0 });
    expect(swept.claimed).toBe(0);
    expect(await claimOrder('held')).toEqual([]);
    await setQueuePaused(t.db, { queue: 'held', paused: false });
    expect(await claimOrder('held')).toEqual(['A', 'B', 'A', 'B', 'A', 'B', 'A', 'B', 'A', 'B']);
  });
});

describe('the weight floor (migration 0031)', () => {
  it("the smallest weight's tenant enqueues and is swept beside others; the table refuses a smaller one", async () => {
    const api = createTestApi(t.db);
    expect((await api.admin('PUT', '/v1/admin/tenants/light', { body: { weight: 0.001 } })).status).toBe(200);
    const batch = Array.from({ length: 1000 }, () => ({ task: 'noop', runAt: T0 }));
    await h.enqueue(batch, { now: new Date(T0.getTime() - 60_000), tenant: 'light' });
    await h.enqueue(batch.slice(0, 10), { now: new Date(T0.getTime() - 60_000), tenant: 'other' });
    await h.sweep({ now: T0 });
    const claimed = await t.db.query<{ tenant: string; n: number }>(
      `select tenant, count(*)::int as n from tasks where status = 'running' group by tenant order by tenant`,
    );
    // The other tenant's 10 come first; the light one's vtimes are all finite.
    expect(claimed.find((r) => r.tenant === 'other')?.n).toBe(10);
    expect(await t.db.query(`select count(*)::int as n from tasks where vtime = 'infinity'::float8 or vtime = 'NaN'::float8`)).toEqual([{ n: 0 }]);
    await expect(t.db.query(`update tenants set weight = 0.0009 where tenant = 'light'`)).rejects.toThrow(/tenants_weight_range/);
  });
});

describe('the admin and queue endpoints', () => {
  it('set weights and pauses, and show counts and lag per queue for the caller only', async () => {
    const api = createTestApi(t.db);
    api.setNow(T0);
    expect((await api.admin('PUT', '/v1/admin/tenants/acme', { body: { queue: 'mail', weight: 2.5 } })).body).toEqual({
      tenant: 'acme',
      queue: 'mail',
      weight: 2.5,
    });
    const bad = await api.admin('PUT', '/v1/admin/tenants/acme', { body: { weight: 0 } });
    expect(bad.status).toBe(400);
    expect(bad.body.error.details[0].path).toBe('weight');
    // So small that n / weight overflows: refused, and nothing written.
    for (const weight of [5e-324, 1e-306, 0.0009]) {
      const tiny = await api.admin('PUT', '/v1/admin/tenants/tiny', { body: { weight } });
      expect(tiny.status, String(weight)).toBe(400);
      expect(tiny.body.error.details[0].path).toBe('weight');
    }
    expect(await t.db.query(`select 1 from tenants where tenant = 'tiny'`)).toEqual([]);
    expect((await api.admin('PUT', '/v1/admin/queues/mail', { body: { paused: true } })).body).toEqual({ name: 'mail', paused: true });

    await h.enqueue([{ task: 'noop', queue: 'mail', runAt: new Date(T0.getTime() - 90_000) }, { task: 'noop', queue: 'mail', delay: 3600 }], {
      now: T0,
      tenant: 'acme',
    });
    await h.enqueue({ task: 'noop', queue: 'mail' }, { now: T0, tenant: 'other' });
    const q = await api.admin('GET', '/v1/queues', { tenant: 'acme' });
    expect(q.status).toBe(200);
    expect(q.body.queues).toEqual([
      {
        name: 'mail',
        paused: true,
        counts: { scheduled: 1, queued: 1, running: 0, succeeded: 0, dead: 0, cancelled: 0, missed: 0 },
        lagSeconds: 90,
      },
    ]);
  });
});
