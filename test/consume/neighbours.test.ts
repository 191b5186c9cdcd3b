// S18: one slow task in a consumer batch never holds its neighbours' results
// past their leases (issue 10, finding 2). Each result is stored as soon as
// its handler settles and its message is acknowledged then, so the reaper
// never finds a finished neighbour still `running`. Time travels through the
// `now` override: the sweep below runs two minutes "later" while the slow
// handler is still held open by a latch.
import { beforeEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import type { Verdict } from '../../src/consume/consume.ts';
import { getTask } from '../../src/db/sql/tasks-read.ts';
import { defineTask } from '../../src/handlers/registry.ts';
import type { TaskInput } from '../../src/tasks/enqueue.ts';
import { resetTables, T0, at, useTestDatabase } from '../helpers/db.ts';
import { latch } from '../helpers/faults.ts';
import { createHarness, type Harness } from '../helpers/harness.ts';
import { expectOneCompletion } from '../helpers/invariants.ts';

const t = useTestDatabase();
let h: Harness;
const runs = new Map<string, number>();
let release = latch();
let slowStarted = latch();

const slowTask = defineTask('slow', z.object({}).default({}), async () => {
  slowStarted.open();
  await release.wait;
});
const quickTask = defineTask('quick', z.object({}).default({}), async (_p, ctx) => {
  runs.set(ctx.taskId, (runs.get(ctx.taskId) ?? 0) + 1);
});

beforeEach(async () => {
  await resetTables(t.db);
  runs.clear();
  release = latch();
  slowStarted = latch();
  h = createHarness(t.db, { handlers: [slowTask, quickTask] });
});

async function enqueue(input: TaskInput): Promise<string> {
  const [r] = await h.enqueue(input, { now: T0 });
  return r!.task!.id;
}

/** Polls (no fixed sleep) until `check` holds or `ms` pass. */
async function eventually(check: () => Promise<boolean>, ms = 5_000): Promise<boolean> {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    if (await check()) return true;
    await new Promise((r) => setTimeout(r, 10));
  }
  return check();
}

describe('a slow task beside fast neighbours in one batch', () => {
  it('every neighbour is stored and acknowledged once, attempt 1, while the slow one still runs', async () => {
    // The slow one may run ten minutes; its neighbours' leases are 1 s + 30 s grace.
    const slow = await enqueue({ task: 'slow', timeout: 600 });
    const fast = await Promise.all([
      enqueue({ task: 'quick', timeout: 1 }),
      enqueue({ task: 'quick', timeout: 1, delivery: 'at_most_once' }),
      enqueue({ task: 'quick', timeout: 1 }),
      enqueue({ task: 'quick', timeout: 1, delivery: 'at_most_once' }),
    ]);
    await h.sweep({ now: T0 });
    const sent = h.outbox.take();
    expect(sent).toHaveLength(5);

    const acked: string[] = [];
    const consumed = h.consume(
      sent.map((m) => m.body),
      { now: T0, onSettled: (i: number, v: Verdict) => v === 'ack' && acked.push(sent[i]!.body.id) },
    );
    await slowStarted.wait;
    const neighboursDone = await eventually(async () => {
      const rows = await Promise.all(fast.map((id) => getTask(t.db, 'acme', id)));
      return rows.every((r) => r!.status === 'succeeded');
    });
    expect(neighboursDone, 'neighbours stored while the slow handler runs').toBe(true);
    expect(acked.sort()).toEqual([...fast].sort());
    expect((await getTask(t.db, 'acme', slow))!.status).toBe('running');

    // Two minutes on, every neighbour's lease would have expired: the reaper
    // finds nothing of theirs to take back.
    const later = await h.sweep({ now: at(120) });
    expect(later.reaped).toEqual({ requeued: 0, retried: 0, dead: 0 });

    release.open();
    const outcome = await consumed;
    expect(outcome.verdicts).toEqual(['ack', 'ack', 'ack', 'ack', 'ack']);
    expect(acked).toHaveLength(5);
    for (const id of fast) {
      expect(await getTask(t.db, 'acme', id)).toMatchObject({ status: 'succeeded', attempts: 1, lastError: null });
      expect(runs.get(id)).toBe(1);
    }
    expect((await getTask(t.db, 'acme', slow))!.status).toBe('succeeded');
    await h.drain({ now: at(3600) });
    for (const id of fast) expect(runs.get(id)).toBe(1);
    await expectOneCompletion(t.db);
  });

  it('results settling together share one finish statement', async () => {
    const ids = await Promise.all([1, 2, 3, 4, 5, 6].map(() => enqueue({ task: 'quick' })));
    await h.sweep({ now: T0 });
    await h.consume(h.outbox.take().map((m) => m.body), { now: T0 });
    expect(await finishCalls()).toBe(1);
    for (const id of ids) expect((await getTask(t.db, 'acme', id))!.status).toBe('succeeded');
  });
});

/** Finish statements that wrote the succeeded rows: each commits in its own transaction (xmin). */
async function finishCalls(): Promise<number> {
  const rows = await t.db.query<{ n: number }>(`select count(distinct xmin::text)::int as n from tasks where status = 'succeeded'`);
  return rows[0]!.n;
}
