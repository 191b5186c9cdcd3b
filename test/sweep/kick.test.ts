// The dispatch kick after an enqueue (src/sweep/kick.ts): debounced per
// isolate and queue, and it leaves at once when another claim of the queue is
// at work instead of queueing behind it on the queue's row.
import { beforeEach, describe, expect, it } from 'vitest';
import { claimTasks } from '../../src/db/sql/tasks-dispatch.ts';
import { setQueuePaused } from '../../src/db/sql/tenants.ts';
import { countStatements } from '../../src/db/seam.ts';
import { createKicker, STALE_KICK_MS } from '../../src/sweep/kick.ts';
import { defaultConfig } from '../../src/config.ts';
import { silentLogger } from '../../src/log.ts';
import type { Db } from '../../src/db/seam.ts';
import { T0, resetTables, useTestDatabase } from '../helpers/db.ts';
import { claimsCounted, createPumpbox } from '../helpers/harness.ts';
import { createTestApi } from '../helpers/http.ts';

const t = useTestDatabase({ maxConnections: 20 });

beforeEach(async () => {
  await resetTables(t.db);
});

const statusCounts = async () =>
  Object.fromEntries(
    (await t.db.query<{ status: string; n: number }>('select status, count(*)::int as n from tasks group by status')).map((r) => [r.status, r.n]),
  );

describe('the dispatch kick', () => {
  it('50 concurrent enqueues of one tenant all succeed and are all dispatched by a few debounced claims', async () => {
    const counted = countStatements(t.db);
    const api = createTestApi(counted.db);
    const replies = await Promise.all(
      Array.from({ length: 50 }, (_, i) => api.admin('POST', '/v1/tasks', { tenant: 'acme', body: { task: 'noop', payload: { i } } })),
    );
    expect(replies.map((r) => r.status)).toEqual(Array(50).fill(201));
    await api.settle();
    expect(await statusCounts()).toEqual({ running: 50 });
    expect(new Set(api.outbox.messages.map((m) => m.body.id)).size).toBe(50);
    // One kick per isolate and queue, plus trailing rounds for work that
    // arrived while it ran: a few claims, not fifty.
    const claims = claimsCounted(counted.counts.byName);
    expect(claims).toBeGreaterThanOrEqual(1);
    expect(claims).toBeLessThanOrEqual(4);
    expect(counted.counts.byName.tasks_insert_batch_plain).toBe(50);
    // claimed_by names the kick's invocation, in 17 characters (every version of the row carries it).
    const holders = await t.db.query<{ by: string }>(`select distinct claimed_by as by from tasks`);
    for (const { by } of holders) expect(by).toMatch(/^kick:[0-9a-f]{12}$/);
  });

  it('concurrent enqueues of two tenants keep fair shares', async () => {
    const api = createTestApi(t.db);
    api.setNow(T0);
    await setQueuePaused(t.db, { queue: 'fair', paused: true }); // the kicks claim nothing; the order is checked below
    const replies = await Promise.all(
      Array.from({ length: 100 }, (_, i) =>
        api.admin('POST', '/v1/tasks', { tenant: i % 2 ? 'B' : 'A', body: { task: 'noop', queue: 'fair', payload: { i } } }),
      ),
    );
    expect(replies.every((r) => r.status === 201)).toBe(true);
    await api.settle();
    await setQueuePaused(t.db, { queue: 'fair', paused: false });
    const order: string[] = [];
    for (;;) {
      const { claimed } = await claimTasks(t.db, { now: T0, queue: 'fair', limit: 10, claimedBy: 'test', leaseSeconds: 60 });
      if (claimed.length === 0) break;
      const rows = await t.db.query<{ id: string; tenant: string }>('select id, tenant from tasks where id = any($1::bigint[])', [claimed.map((c) => c.id)]);
      const tenantOf = new Map(rows.map((r) => [String(r.id), r.tenant]));
      order.push(...claimed.map((c) => tenantOf.get(c.id)!));
    }
    expect(order).toHaveLength(100);
    // Start-time fair queuing: in every prefix the two tenants' shares differ by little.
    for (let n = 10; n <= 100; n += 10) {
      const a = order.slice(0, n).filter((x) => x === 'A').length;
      expect(Math.abs(a - n / 2)).toBeLessThanOrEqual(2);
    }
  });

  it('while another claim holds the queue row, an enqueue still answers and its kick leaves at once, dispatching once it is free', async () => {
    const counted = countStatements(t.db);
    const done: { rounds: number; claimed: number; busy: number }[] = [];
    const kicker = createKicker({ intervalMs: 50, onDone: (_, c) => done.push(c) });
    const api = createTestApi(counted.db, { kicker });
    // A claim in flight elsewhere (a sweep, another isolate's kick) holds the queue's row.
    await api.admin('POST', '/v1/tasks', { tenant: 'acme', body: { task: 'noop', delay: 3600 } }); // creates the queue's row
    let release!: () => void;
    const released = new Promise<void>((resolve) => (release = resolve));
    let holding!: () => void;
    const held = new Promise<void>((resolve) => (holding = resolve));
    const other = t.db.transaction(async (tx) => {
      await tx.query(`update queues set vclock = vclock where name = 'default'`);
      holding();
      await released;
    });
    await held;
    const kicksBefore = counted.counts.byName.queues_probe_claim_free ?? 0;
    const r = await api.admin('POST', '/v1/tasks', { tenant: 'acme', body: { task: 'noop' } });
    expect(r.status).toBe(201);
    // The kick probes, finds the queue busy and does not wait on the row.
    for (let i = 0; i < 100 && (counted.counts.byName.queues_probe_claim_free ?? 0) < kicksBefore + 2; i++) {
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    expect(counted.counts.byName.queues_probe_claim_free ?? 0).toBeGreaterThanOrEqual(kicksBefore + 2);
    expect(claimsCounted(counted.counts.byName)).toBe(0);
    release();
    await other;
    await api.settle();
    expect(done.at(-1)).toMatchObject({ claimed: 1 });
    expect(done.at(-1)!.busy).toBeGreaterThanOrEqual(1);
    expect(api.outbox.messages.map((m) => m.body.id)).toEqual([r.body.id]);
  });
});

describe('a kick meeting a backlog (issue 13)', () => {
  it('asks for MAX_DISPATCHERS pumps at its first backlog, one more at each later round that finds one, and none without', async () => {
    const config = { ...defaultConfig, sweepBatchSize: 10, maxDispatchers: 3 };
    const api = createTestApi(t.db);
    await api.admin('POST', '/v1/tasks', { tenant: 'acme', body: { task: 'noop', delay: 3600 } }); // the queue's row
    await t.db.query(`update queues set paused = true where name = 'default'`);
    for (let i = 0; i < 25; i++) await api.admin('POST', '/v1/tasks', { tenant: 'acme', body: { task: 'noop' } });
    await api.settle();
    await t.db.query(`update queues set paused = false where name = 'default'`);
    const pumps = createPumpbox();
    const run = async () => {
      const pending: Promise<unknown>[] = [];
      const kicker = createKicker({ intervalMs: 0 });
      kicker.kick({ db: t.db, config, sender: api.outbox, pumps, log: silentLogger, waitUntil: (p) => pending.push(p) }, ['default']);
      await Promise.all(pending);
    };
    await run(); // 25 waiting: three rounds (10, 10, 5); the fan-out, then one more for the second backlog
    expect(pumps.take()).toEqual(Array(4).fill({ kind: 'pump' }));
    expect(await statusCounts()).toEqual({ scheduled: 1, running: 25 });
    await api.admin('POST', '/v1/tasks', { tenant: 'acme', body: { task: 'noop' } });
    await api.settle();
    await run(); // one waiting: no pump
    expect(pumps.take()).toEqual([]);
  });
});

describe('a kick that never reports back', () => {
  it('is presumed gone after STALE_KICK_MS and the next enqueue starts a new one', async () => {
    let clock = 1_000_000;
    const done: unknown[] = [];
    // Only the kicks of queue 'other' are counted: the enqueue's own kick (queue
    // 'default') finishes whenever the machine gets to it.
    const kicker = createKicker({ intervalMs: 0, clock: () => clock, onDone: (queue, c) => queue === 'other' && done.push(c) });
    // The first kick's invocation hangs forever (its waitUntil was cut off).
    const hung: Db = { ...t.db, query: () => new Promise(() => {}), transaction: () => new Promise(() => {}) };
    const api = createTestApi(t.db, { kicker });
    const first = await api.admin('POST', '/v1/tasks', { tenant: 'acme', body: { task: 'noop' } });
    expect(first.status).toBe(201);
    kicker.kick({ db: hung, config: defaultConfig, sender: api.outbox, log: silentLogger, waitUntil: () => {} }, ['other']);
    // Within the bound a second request only marks the hung kick to run again...
    clock += STALE_KICK_MS - 1;
    const pending: Promise<unknown>[] = [];
    kicker.kick({ db: t.db, config: defaultConfig, sender: api.outbox, log: silentLogger, waitUntil: (p) => pending.push(p) }, ['other']);
    expect(pending).toHaveLength(0);
    // ...past it, it starts a kick of its own.
    clock += 1;
    kicker.kick({ db: t.db, config: defaultConfig, sender: api.outbox, log: silentLogger, waitUntil: (p) => pending.push(p) }, ['other']);
    expect(pending).toHaveLength(1);
    await Promise.all(pending);
    expect(done).toHaveLength(1);
  });
});
