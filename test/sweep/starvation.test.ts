// S19: one queue's backlog cannot starve another queue's due task (issue 10,
// finding 3). Queue names are chosen by tenants, and "0" sorts before
// "default". The sweep's budget clock is a counter that advances one "ms" per
// reading, so a pass is bounded deterministically and the backlog is far
// larger than one pass can move. The pass starts at the first queue in name
// order (random: 0), the hog's.
import { beforeAll, describe, expect, it } from 'vitest';
import { getTask } from '../../src/db/sql/tasks-read.ts';
import type { TaskInput } from '../../src/tasks/enqueue.ts';
import { resetTables, T0, at, useTestDatabase } from '../helpers/db.ts';
import { createHarness, type Harness } from '../helpers/harness.ts';

const t = useTestDatabase();
const BACKLOG = 20_000;
const config = { sweepBatchSize: 100, promoteBatchSize: 100, sweepTimeBudgetMs: 100 };

/** A budget clock that advances by one on every reading. */
function ticking(): () => number {
  let n = 0;
  return () => n++;
}

async function fill(h: Harness, queue: string, input: Partial<TaskInput>, now: Date, count: number): Promise<void> {
  for (let done = 0; done < count; done += 1000) {
    const n = Math.min(1000, count - done);
    await h.enqueue(Array.from({ length: n }, () => ({ task: 'noop', queue, ...input })), { now, tenant: 'hog' });
  }
}

describe('no queue or step starves the others', () => {
  let h: Harness;
  beforeAll(async () => {
    await resetTables(t.db);
    h = createHarness(t.db, { config });
  });

  it('a backlog of 20,000 runnable tasks in queue "0" does not delay a due task of "default" past one pass', async () => {
    await fill(h, '0', {}, T0, BACKLOG);
    const [mine] = await h.enqueue({ task: 'noop' }, { now: T0 });
    const pass = await h.sweep({ now: T0, elapsed: ticking(), random: () => 0 });
    expect(pass.budgetExhausted).toBe(true);
    expect(pass.claimed).toBeLessThan(BACKLOG);
    expect(await getTask(t.db, 'acme', mine!.task!.id)).toMatchObject({ status: 'running', attempts: 1 });
    expect(h.outbox.take().some((m) => m.body.id === mine!.task!.id)).toBe(true);
  });

  it('a backlog of 20,000 tasks to promote does not stop dispatch of a due task in the same pass', async () => {
    await resetTables(t.db);
    await fill(h, '0', { delay: 3600 }, T0, BACKLOG);
    const [mine] = await h.enqueue({ task: 'noop' }, { now: at(3600) });
    const pass = await h.sweep({ now: at(3600), elapsed: ticking(), random: () => 0 });
    expect(pass.budgetExhausted).toBe(true);
    expect(pass.promoted).toBeGreaterThan(0);
    expect(pass.promoted).toBeLessThan(BACKLOG);
    expect(await getTask(t.db, 'acme', mine!.task!.id)).toMatchObject({ status: 'running', attempts: 1 });
  });
});
