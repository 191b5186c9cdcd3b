// Priorities (issue 16): which of a tenant's tasks fill the claim slots its
// fair share earned; never a larger share.
import { beforeEach, describe, expect, it } from 'vitest';
import { claimTasks } from '../../src/db/sql/tasks-dispatch.ts';
import { setTenantWeight } from '../../src/db/sql/tenants.ts';
import { resetTables, T0, useTestDatabase } from '../helpers/db.ts';
import { createHarness, type Harness } from '../helpers/harness.ts';
import { createTestApi } from '../helpers/http.ts';

const t = useTestDatabase();
let h: Harness;
beforeEach(async () => {
  await resetTables(t.db);
  h = createHarness(t.db);
});

async function claimBatch(queue: string, limit: number) {
  const { claimed } = await claimTasks(t.db, { now: T0, queue, limit, claimedBy: 'priority', leaseSeconds: 60 });
  const rows = await t.db.query<{ id: string; tenant: string; priority: number }>(
    'select id, tenant, priority from tasks where id = any($1::bigint[])',
    [claimed.map((c) => c.id)],
  );
  const byId = new Map(rows.map((r) => [String(r.id), r]));
  return claimed.map((c) => byId.get(c.id)!);
}

/** A seeded generator, so a failure reproduces. */
function seeded(seed: number) {
  let s = seed >>> 0;
  return () => ((s = (Math.imul(s, 1664525) + 1013904223) >>> 0) / 2 ** 32);
}

describe('priority', () => {
  it('inside one tenant, a priority 10 task enqueued after 1,000 priority 0 tasks is in the next batch', async () => {
    await h.enqueue(Array.from({ length: 1000 }, (_, i) => ({ task: 'noop', queue: 'p', payload: { i } })), { now: T0 });
    const [urgent] = await h.enqueue({ task: 'noop', queue: 'p', priority: 10 }, { now: T0 });
    const batch = await claimBatch('p', 100);
    expect(batch).toHaveLength(100);
    expect(batch[0]!.id).toBe(urgent!.task!.id);
    // Every task is still claimed exactly once.
    const seen = new Set(batch.map((b) => b.id));
    for (;;) {
      const next = await claimBatch('p', 100);
      if (next.length === 0) break;
      for (const b of next) {
        expect(seen.has(b.id)).toBe(false);
        seen.add(b.id);
      }
    }
    expect(seen.size).toBe(1001);
  });

  it('claims higher priority first, then by due time', async () => {
    const priorities = [0, 5, -10, 5, 0, 10, -1, 0];
    const written = await h.enqueue(
      priorities.map((priority, i) => ({ task: 'noop', queue: 'p', priority, runAt: new Date(T0.getTime() - 60_000 + i) })),
      { now: T0 },
    );
    const ids = written.map((w) => w.task!.id);
    const order: string[] = [];
    for (let i = 0; i < 4; i++) order.push(...(await claimBatch('p', 2)).map((b) => b.id));
    // 10; 5 (earlier), 5; 0, 0, 0 by due time; -1; -10.
    expect(order).toEqual([5, 1, 3, 0, 4, 7, 6, 2].map((i) => ids[i]));
  });

  it('across tenants, weighted shares stay within 2 points with priorities mixed in', async () => {
    const random = seeded(16);
    await setTenantWeight(t.db, { queue: 'fair', tenant: 'B', weight: 3 });
    const backlog = async (tenant: string, n: number) => {
      for (let i = 0; i < n; i += 1000) {
        const tasks = Array.from({ length: Math.min(1000, n - i) }, () => ({
          task: 'noop',
          queue: 'fair',
          priority: Math.floor(random() * 21) - 10,
        }));
        await h.enqueue(tasks, { now: T0, tenant });
      }
    };
    await backlog('A', 10_000);
    await backlog('B', 1_000);
    await backlog('C', 100);
    const order: string[] = [];
    for (;;) {
      const batch = await claimBatch('fair', 100);
      if (batch.length === 0) break;
      order.push(...batch.map((b) => b.tenant));
    }
    expect(order).toHaveLength(11_100);
    const lastOf = (tenant: string) => order.lastIndexOf(tenant);
    const window = Math.min(lastOf('A'), lastOf('B'), lastOf('C')) + 1;
    const share = (tenant: string) => order.slice(0, window).filter((x) => x === tenant).length / window;
    expect(Math.abs(share('A') - 1 / 5)).toBeLessThanOrEqual(0.02);
    expect(Math.abs(share('B') - 3 / 5)).toBeLessThanOrEqual(0.02);
    expect(Math.abs(share('C') - 1 / 5)).toBeLessThanOrEqual(0.02);
    expect(lastOf('C') + 1).toBeLessThanOrEqual(500);
  }, 60_000);

  it("a high priority never takes another tenant's share: a tenant of priority 10 tasks still gets half of a batch", async () => {
    await h.enqueue(Array.from({ length: 200 }, () => ({ task: 'noop', queue: 'p' })), { now: T0, tenant: 'low' });
    await h.enqueue(Array.from({ length: 200 }, () => ({ task: 'noop', queue: 'p', priority: 10 })), { now: T0, tenant: 'high' });
    const batch = await claimBatch('p', 100);
    expect(batch.filter((b) => b.tenant === 'high')).toHaveLength(50);
  });

  it('is validated (-10..10, an integer), 400 naming the field, nothing stored', async () => {
    const api = createTestApi(t.db);
    for (const priority of [11, -11, 1.5, '1']) {
      const r = await api.admin('POST', '/v1/tasks', { body: { task: 'noop', priority } });
      expect(r.status).toBe(400);
      expect(r.body.error.details.map((d: { path: string }) => d.path)).toEqual(['priority']);
    }
    expect((await t.db.query('select 1 from tasks')).length).toBe(0);
    const ok = await api.admin('POST', '/v1/tasks', { body: { task: 'noop', priority: -10, delay: 60 } });
    expect(ok.body.priority).toBe(-10);
    const put = await api.admin('PUT', '/v1/schedules/prio', { tenant: 'acme', body: { interval: 60, task: 'noop', priority: 7 } });
    expect(put.body.priority).toBe(7);
  });
});
