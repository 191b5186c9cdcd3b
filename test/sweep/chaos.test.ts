// A cheap Jepsen (RELIABILITY S9): eight workers sweep and consume 5,000
// tasks of 50 tenants at once, over one database, with seeded random
// cut-offs at every step boundary, lost and duplicated messages; a second
// run with parallel dispatch (issue 13): sweeps fan out to pump messages
// that travel in the same lossy Queue, and pumps (at most 4 at once) claim
// and send beside the sweeps, cut off at their steps too. Afterwards
// every invariant holds: nothing lost (I1), one accepted completion per
// success (I2), and no at-most-once task handed to a handler twice. The
// database trigger checks I3-I5 on every single write meanwhile.
import { beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import type { Db } from '../../src/db/seam.ts';
import type { FaultPoint, Faults } from '../../src/faults.ts';
import { defineTask } from '../../src/handlers/registry.ts';
import { isPumpMessage, type PumpMessage, type TaskMessage } from '../../src/queue/messages.ts';
import { T0, useTestDatabase } from '../helpers/db.ts';
import { Crash, seeded } from '../helpers/faults.ts';
import { createHarness, type Harness } from '../helpers/harness.ts';
import { expectNoLoss, expectOneCompletion } from '../helpers/invariants.ts';

const SEED = Number(process.env.CHAOS_SEED ?? 20261129);
const TASKS = Number(process.env.CHAOS_TASKS ?? 5000);
const WORKERS = 8;

const t = useTestDatabase();
const dbs: Db[] = [];
beforeAll(async () => {
  for (let i = 0; i < WORKERS; i++) dbs.push(await t.open({ maxConnections: 2, applicationName: `chaos-${i}` }));
});

describe(`chaos (seed ${SEED})`, () => {
  for (const [design, parallel] of [
    ['serial dispatch', false],
    ['parallel dispatch (pumps, MAX_DISPATCHERS 4)', true],
  ] as const)
  it(`${WORKERS} concurrent sweeps and consumers over ${TASKS} tasks with random cut-offs lose nothing: ${design}`, async ({ annotate }) => {
    if (parallel) await t.db.query(`update dispatcher_slots set token = null, expires_at = '-infinity'`);
    await t.db.query('truncate tasks, tenants, queues, task_events, concurrency_slots, tenant_pending_counts restart identity cascade');
    const random = seeded(SEED);
    const runs = new Map<string, number>();
    const count = defineTask('count', z.object({}).default({}), async (_p, ctx) => {
      runs.set(ctx.taskId, (runs.get(ctx.taskId) ?? 0) + 1);
    });
    const workers: Harness[] = dbs.map((db) =>
      createHarness(db, { handlers: [count], config: { sweepBatchSize: 50, maxDispatchers: 4, pumpTimeBudgetMs: 3 } }),
    );
    const slots = new Set<number>();
    let pumpRuns = 0;

    // 5,000 tasks, 50 tenants, due over the first two minutes; a third at-most-once.
    const delivery = new Map<string, string>();
    for (let tenant = 0; tenant < 50; tenant++) {
      const inputs = Array.from({ length: TASKS / 50 }, () => ({
        task: 'count',
        maxAttempts: 10,
        runAt: new Date(T0.getTime() + Math.floor(random() * 120_000)),
        delivery: random() < 1 / 3 ? ('at_most_once' as const) : ('at_least_once' as const),
      }));
      const written = await workers[tenant % WORKERS]!.enqueue(inputs, { now: T0, tenant: `t${tenant}` });
      for (const r of written) delivery.set(r.task!.id, r.task!.delivery);
    }

    // The "Queue": messages every worker may receive, redelivered when unacked.
    let inFlight: (TaskMessage | PumpMessage)[] = [];
    const chaos = (p: number): Faults => (point: FaultPoint) => {
      if (random() < p) throw new Crash(point);
    };
    let now = T0;
    const step = async (w: Harness, faulty: boolean) => {
      try {
        await w.sweep({ now, faults: faulty ? chaos(0.08) : undefined, pumps: parallel ? true : undefined });
      } catch (error) {
        if (!(error instanceof Crash)) throw error;
      }
      const transit = () => {
        for (const body of [...w.outbox.take().map((m) => m.body), ...w.pumpbox.take()]) {
          if (faulty && random() < 0.03) continue; // lost in transit
          inFlight.push(body);
          if (faulty && random() < 0.05) inFlight.push(body); // delivered twice
        }
      };
      transit();
      const take = Math.min(inFlight.length, 1 + Math.floor(random() * 100));
      const taken = inFlight.splice(0, take);
      // A pump message makes this worker a dispatcher (its budget: a few batches), cut off like the rest.
      for (const _pump of taken.filter(isPumpMessage)) {
        let tick = 0;
        try {
          const c = await w.pump({ now, faults: faulty ? chaos(0.08) : undefined, elapsed: () => tick++ });
          pumpRuns += 1;
          if (c.slot !== null) slots.add(c.slot);
        } catch (error) {
          if (!(error instanceof Crash)) throw error;
        }
        transit();
      }
      const batch = taken.filter((b): b is TaskMessage => !isPumpMessage(b));
      if (batch.length === 0) return;
      try {
        const out = await w.consume(batch, { now, faults: faulty ? chaos(0.06) : undefined });
        out.verdicts.forEach((v, i) => v === 'retry' && inFlight.push(batch[i]!));
      } catch (error) {
        if (!(error instanceof Crash)) throw error;
        if (!faulty || random() < 0.8) inFlight.push(...batch); // the Queue redelivers unacked messages
      }
    };

    // Faulty phase: time moves 5 s per round, every worker acts concurrently.
    for (let round = 0; round < 60; round++) {
      await Promise.all(workers.map((w) => step(w, true)));
      now = new Date(now.getTime() + 5_000);
    }
    // Calm phase: no more faults; time jumps far enough for every lease and backoff.
    for (let round = 0; round < 40; round++) {
      await Promise.all(workers.map((w) => step(w, false)));
      const open = await t.db.query<{ n: number }>(
        `select count(*)::int as n from tasks where status not in ('succeeded', 'dead', 'cancelled', 'missed')`,
      );
      if (open[0]!.n === 0 && inFlight.length === 0) break;
      now = new Date(now.getTime() + 120_000);
    }

    await expectNoLoss(t.db, now);
    await expectOneCompletion(t.db);
    const states = await t.db.query<{ status: string; n: number }>(`select status, count(*)::int as n from tasks group by 1`);
    const total = states.reduce((s, r) => s + r.n, 0);
    expect(total).toBe(TASKS);
    // at-most-once: never handed to a handler twice.
    const twice = [...runs].filter(([id, n]) => delivery.get(id) === 'at_most_once' && n > 1);
    expect(twice).toEqual([]);
    // at-least-once: ran at least once, unless every one of its attempts was cut off.
    const neverRan = await t.db.query<{ id: string; status: string; attempts: number }>(
      `select id, status, attempts from tasks where delivery = 'at_least_once' and status <> 'succeeded'`,
    );
    for (const row of neverRan) expect(row).toMatchObject({ status: 'dead', attempts: 10 });
    const succeeded = await t.db.query<{ id: string }>(`select id from tasks where status = 'succeeded'`);
    for (const { id } of succeeded) expect(runs.get(String(id)) ?? 0).toBeGreaterThanOrEqual(1);
    // Epochs are strictly increasing per claim, never shared (I3), per the event log.
    const shared = await t.db.query(
      `select task_id, epoch from task_events where to_status = 'running' group by 1, 2 having count(*) > 1 limit 5`,
    );
    expect(shared).toEqual([]);
    // The run's figures, reported with the test (vitest annotations) rather than printed.
    const outcome = states.map((r) => `${r.n} ${r.status}`).sort().join(', ');
    if (parallel) {
      expect(pumpRuns).toBeGreaterThan(0);
      expect([...slots].every((s) => s < 4)).toBe(true);
    }
    await annotate(`seed ${SEED}: ${outcome}; ${[...runs.values()].reduce((a, b) => a + b, 0)} handler runs; ${pumpRuns} pump runs`, 'figures');
  }, 300_000);
});
