// The database connection failing under a sweep or a consumer: terminated
// mid-statement (S5), and a commit whose reply is lost (S4).
import { beforeEach, describe, expect, it } from 'vitest';
import { openNodeDb } from '../../scripts/node-db.ts';
import { getTask } from '../../src/db/sql/tasks-read.ts';
import { inject } from 'vitest';
import { useTestDatabase, resetTables, T0, at } from '../helpers/db.ts';
import { latch } from '../helpers/faults.ts';
import { countingTask, createHarness, type Harness } from '../helpers/harness.ts';
import { startChaosProxy } from '../helpers/tcp-chaos.ts';
import { expectNoLoss } from '../helpers/invariants.ts';

const t = useTestDatabase();
let h: Harness;
const { task: countTask, runs } = countingTask();

beforeEach(async () => {
  await resetTables(t.db);
  runs.clear();
  h = createHarness(t.db, { handlers: [countTask] });
});

describe('S5: a connection terminated mid-statement', () => {
  it('kills a claim in flight; nothing is half-done and the next sweep completes the work', async () => {
    await h.enqueue(Array.from({ length: 200 }, () => ({ task: 'count', queue: 'q' })), { now: T0 });
    // Hold the queue's clock row so the claim blocks inside its statement.
    const blocker = latch();
    const holding = latch();
    const held = t.db.transaction(async (tx) => {
      await tx.query(`select 1 from queues where name = 'q' for update`);
      holding.open();
      await blocker.wait;
    });
    await holding.wait;

    const victimDb = await t.open({ maxConnections: 2, applicationName: 'victim-sweep' });
    const victim = createHarness(victimDb, { handlers: [countTask] });
    // Settled into a value at once: the rejection may arrive while the
    // terminate below is still awaiting its reply, and must not count as unhandled.
    const sweeping = victim.sweep({ now: T0 }).then(
      () => null,
      (error: unknown) => error,
    );
    // Wait until the claim is blocked on the lock, then terminate its backend.
    let pid: number | undefined;
    for (let i = 0; i < 200 && pid === undefined; i++) {
      const rows = await t.db.query<{ pid: number }>(
        `select pid from pg_stat_activity where application_name = 'victim-sweep' and wait_event_type = 'Lock'`,
      );
      pid = rows[0]?.pid;
      if (pid === undefined) await new Promise((r) => setTimeout(r, 25));
    }
    expect(pid).toBeDefined();
    await t.db.query('select pg_terminate_backend($1)', [pid]);
    expect(await sweeping).toMatchObject({ code: 'database_unavailable' });
    blocker.open();
    await held;

    // The claim rolled back whole: every task is still queued at epoch 0.
    const states = await t.db.query<{ status: string; lease_epoch: string; n: number }>(
      `select status, lease_epoch, count(*)::int as n from tasks group by 1, 2`,
    );
    expect(states).toEqual([{ status: 'queued', lease_epoch: '0', n: 200 }]);
    expect(victim.outbox.messages).toEqual([]);

    // The same Db recovers (the pool drops the dead connection) and finishes.
    const next = await victim.sweep({ now: at(1) });
    expect(next.claimed).toBe(200);
    await victim.consume(victim.outbox.take().map((m) => m.body), { now: at(1) });
    await expectNoLoss(t.db, at(1));
    expect([...runs.values()].every((n) => n === 1)).toBe(true);
    expect(runs.size).toBe(200);
  });
});

describe('S4: the ambiguous commit', () => {
  it('a finish that committed but whose reply was lost: the messages are retried, the result stands, nothing runs twice', async () => {
    const server = new URL(t.url);
    const proxy = await startChaosProxy({ host: server.hostname, port: Number(server.port) });
    const viaProxy = new URL(t.url);
    viaProxy.port = String(proxy.port);
    const flakyDb = await openNodeDb(viaProxy.toString(), { wsProxy: inject('wsProxy'), maxConnections: 2 });
    try {
      const flaky = createHarness(flakyDb, { handlers: [countTask] });
      await flaky.enqueue(Array.from({ length: 5 }, () => ({ task: 'count' })), { now: T0 });
      await flaky.sweep({ now: T0 });
      const batch = flaky.outbox.take().map((m) => m.body);

      const cut = proxy.loseReplyTo('tasks_finish_if_running');
      const out = await flaky.consume(batch, { now: T0 });
      await cut;
      // The consumer could not know: it leaves every message for redelivery.
      expect(out.verdicts).toEqual(['retry', 'retry', 'retry', 'retry', 'retry']);
      // But the finish did commit.
      const rows = await t.db.query<{ status: string; n: number }>(`select status, count(*)::int as n from tasks group by 1`);
      expect(rows).toEqual([{ status: 'succeeded', n: 5 }]);

      // Redelivered: every message is stale now, acknowledged, not run.
      const again = await flaky.consume(batch, { now: at(10) });
      expect(again.verdicts.every((v) => v === 'ack')).toBe(true);
      expect(again.results).toEqual([]);
      expect([...runs.values()]).toEqual([1, 1, 1, 1, 1]);
      for (const m of batch) expect(await getTask(t.db, 'acme', m.id)).toMatchObject({ status: 'succeeded', attempts: 1 });
    } finally {
      await flakyDb.close();
      await proxy.close();
    }
  });
});
