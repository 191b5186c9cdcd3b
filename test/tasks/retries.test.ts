// Retries: exponential backoff with full jitter and a cap, poison tasks end
// dead after maxAttempts (S12, S13), permanent errors skip retries,
// Retry-After overrides the backoff, and a timeout aborts the handler.
import { beforeEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { getTask } from '../../src/db/sql/tasks-read.ts';
import { PermanentError, RetryAfterError } from '../../src/handlers/errors.ts';
import { defineTask } from '../../src/handlers/registry.ts';
import { T0, useTestDatabase, resetTables } from '../helpers/db.ts';
import { createHarness, type Harness } from '../helpers/harness.ts';

const t = useTestDatabase();
let h: Harness;
let aborted: { reason: unknown } | undefined;

const handlers = [
  defineTask('poison', z.object({}).default({}), async () => {
    throw new Error('boom');
  }),
  defineTask('fatal', z.object({}).default({}), async () => {
    throw new PermanentError('bad recipient');
  }),
  defineTask('later', z.object({}).default({}), async () => {
    throw new RetryAfterError('busy, come back in 7 s', 7000);
  }),
  defineTask('hang', z.object({}).default({}), async (_p, ctx) => {
    // Ignores nothing: resolves only when told to stop.
    await new Promise<void>((resolve) =>
      ctx.signal.addEventListener('abort', () => {
        aborted = { reason: ctx.signal.reason };
        resolve();
      }),
    );
  }),
];

beforeEach(async () => {
  await resetTables(t.db);
  aborted = undefined;
  h = createHarness(t.db, { handlers });
});

/** Runs every due task once at `now`; returns the tasks as they stand after. */
async function round(now: Date) {
  await h.sweep({ now });
  const sent = h.outbox.take();
  await h.consume(sent.map((m) => m.body), { now });
  return sent.length;
}

describe('a poison task', () => {
  it('becomes dead after maxAttempts claims, keeping its last error, with capped growing delays', async () => {
    const [r] = await h.enqueue({ task: 'poison', maxAttempts: 4, backoff: { base: 10, max: 25 } }, { now: T0 });
    const id = r!.task!.id;
    let now = T0;
    const delays: number[] = [];
    for (let attempt = 1; attempt <= 4; attempt++) {
      expect(await round(now)).toBe(1);
      const task = (await getTask(t.db, 'acme', id))!;
      expect(task.attempts).toBe(attempt);
      expect(task.lastError).toBe('boom');
      if (attempt < 4) {
        expect(task.status).toBe('scheduled');
        const delay = task.runAt.getTime() - now.getTime();
        delays.push(delay);
        expect(delay).toBeGreaterThanOrEqual(0);
        expect(delay).toBeLessThanOrEqual(Math.min(25_000, 10_000 * 2 ** (attempt - 1)));
        now = new Date(task.runAt.getTime() + 1);
      } else {
        expect(task.status).toBe('dead');
        expect(task.finishedAt).not.toBeNull();
      }
    }
    // Nothing more is ever sent.
    expect(await round(new Date(now.getTime() + 86_400_000))).toBe(0);
    const claims = await t.db.query<{ n: number }>(
      `select count(*)::int as n from task_events where task_id = $1 and to_status = 'running'`,
      [id],
    );
    expect(claims[0]!.n).toBe(4);
  });

  it('delays grow with the attempt number on average, and never pass the cap', async () => {
    const n = 200;
    await h.enqueue(
      Array.from({ length: n }, () => ({ task: 'poison', maxAttempts: 4, backoff: { base: 10, max: 25 } })),
      { now: T0 },
    );
    const means: number[] = [];
    let now = T0;
    for (let attempt = 1; attempt <= 3; attempt++) {
      await h.sweep({ now });
      const sent = h.outbox.take();
      expect(sent).toHaveLength(n);
      // Consume in batches of 100, as the Queue would deliver them.
      for (let i = 0; i < sent.length; i += 100) await h.consume(sent.slice(i, i + 100).map((m) => m.body), { now });
      const rows = await t.db.query<{ d: number }>(
        `select extract(epoch from run_at - $1::timestamptz) * 1000 as d from tasks where status = 'scheduled'`,
        [now],
      );
      expect(rows).toHaveLength(n);
      const cap = Math.min(25_000, 10_000 * 2 ** (attempt - 1));
      for (const { d } of rows) {
        expect(Number(d)).toBeGreaterThanOrEqual(0);
        expect(Number(d)).toBeLessThanOrEqual(cap);
      }
      means.push(rows.reduce((s, r) => s + Number(r.d), 0) / n);
      now = new Date(now.getTime() + 30_000);
    }
    // Full jitter: mean ≈ cap/2, i.e. about 5 s, 10 s, 12.5 s.
    expect(means[1]!).toBeGreaterThan(means[0]! * 1.4);
    expect(means[2]!).toBeGreaterThan(means[0]! * 1.6);
    expect(means[2]!).toBeLessThan(25_000 * 0.65);
  });

  it('backs off in SQL within [0, min(max, base·2^(n−1))]', async () => {
    const rows = await t.db.query<{ attempt: number; lo: number; hi: number }>(
      `select a as attempt, min(task_backoff_ms(1000, 60000, a)) as lo, max(task_backoff_ms(1000, 60000, a)) as hi
       from generate_series(1, 10) a, generate_series(1, 500) s group by a order by a`,
    );
    for (const r of rows) {
      const cap = Math.min(60_000, 1000 * 2 ** (r.attempt - 1));
      expect(r.lo).toBeGreaterThanOrEqual(0);
      expect(r.hi).toBeLessThanOrEqual(cap);
      expect(r.hi).toBeGreaterThan(cap * 0.9); // jitter spans the range ...
      expect(r.lo).toBeLessThan(cap * 0.1); // ... from (nearly) nothing
    }
  });
});

describe('handler outcomes', () => {
  it('a PermanentError goes straight to dead after one attempt', async () => {
    const [r] = await h.enqueue({ task: 'fatal', maxAttempts: 5 }, { now: T0 });
    await round(T0);
    expect(await getTask(t.db, 'acme', r!.task!.id)).toMatchObject({
      status: 'dead',
      attempts: 1,
      lastError: 'PermanentError: bad recipient',
    });
  });

  it('a RetryAfterError sets the next run exactly that far out', async () => {
    const [r] = await h.enqueue({ task: 'later' }, { now: T0 });
    await round(T0);
    const task = (await getTask(t.db, 'acme', r!.task!.id))!;
    expect(task.status).toBe('scheduled');
    expect(task.runAt.getTime() - T0.getTime()).toBe(7000);
  });

  it('a handler past its timeout is aborted through its signal and the attempt fails', async () => {
    const [r] = await h.enqueue({ task: 'hang', timeout: 0.05, maxAttempts: 2 }, { now: T0 });
    await round(T0);
    expect(aborted).toBeDefined();
    expect((aborted!.reason as Error).name).toBe('TimeoutError');
    const task = (await getTask(t.db, 'acme', r!.task!.id))!;
    expect(task).toMatchObject({ status: 'scheduled', attempts: 1 });
    expect(task.lastError).toBe('TimeoutError: timed out after 50 ms');
  });

  it('an at_most_once task that fails is not retried', async () => {
    const [r] = await h.enqueue({ task: 'poison', delivery: 'at_most_once', maxAttempts: 5 }, { now: T0 });
    await round(T0);
    expect(await getTask(t.db, 'acme', r!.task!.id)).toMatchObject({ status: 'dead', attempts: 1, lastError: 'boom' });
  });
});
