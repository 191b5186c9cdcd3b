// Retries: exponential backoff with full jitter and a cap, poison tasks end
// dead after maxAttempts (S12, S13), permanent errors skip retries,
// Retry-After overrides the backoff, and a timeout aborts the handler.
import { beforeEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { getTask } from '../../src/db/sql/tasks-read.ts';
import { PermanentError, RETRY_AFTER_MAX_MS, RetryAfterError } from '../../src/handlers/errors.ts';
import { defineTask } from '../../src/handlers/registry.ts';
import { T0, useTestDatabase, resetTables } from '../helpers/db.ts';
import { createHarness, type Harness } from '../helpers/harness.ts';

const t = useTestDatabase();
let h: Harness;
let aborted: { reason: unknown } | undefined;
let retryDelays: number[] = [];

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
  // The delay by index: NaN and Infinity cannot travel in a JSON payload.
  defineTask('come-back', z.object({ k: z.int() }), async ({ k }) => {
    throw new RetryAfterError('come back', retryDelays[k]!);
  }),
  defineTask('fine', z.object({}).default({}), async () => 'ok'),
  // Returns at once, leaving work behind that listens on its signal.
  defineTask('leaves-work', z.object({}).default({}), async (_p, ctx) => {
    ctx.signal.addEventListener('abort', () => {
      aborted = { reason: ctx.signal.reason };
    });
    return 'done';
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

  it("a RetryAfterError of any number is stored, and never costs its batch neighbours' results", async () => {
    // 30 days is past the int of milliseconds the fenced finish takes; a
    // fraction is no int; NaN is no delay (the task's backoff: full jitter
    // within its 10 s).
    const cases: [number, number | 'backoff'][] = [
      [30 * 86_400_000, RETRY_AFTER_MAX_MS],
      [Infinity, RETRY_AFTER_MAX_MS],
      [1500.4, 1500],
      [-5, 0],
      [NaN, 'backoff'],
    ];
    retryDelays = cases.map(([ms]) => ms);
    const enqueued = await h.enqueue(
      [...cases.map((_, k) => ({ task: 'come-back', payload: { k }, backoff: { base: 10, max: 10 }, maxAttempts: 3 })), { task: 'fine' }],
      { now: T0 },
    );
    await h.sweep({ now: T0 });
    const sent = h.outbox.take();
    expect(sent).toHaveLength(cases.length + 1);
    const out = await h.consume(sent.map((m) => m.body), { now: T0 });
    expect(out.verdicts).toEqual(sent.map(() => 'ack'));
    expect((await getTask(t.db, 'acme', enqueued.at(-1)!.task!.id))!.status).toBe('succeeded');
    for (const [k, [ms, expected]] of cases.entries()) {
      const task = (await getTask(t.db, 'acme', enqueued[k]!.task!.id))!;
      expect(task, `delay ${ms}`).toMatchObject({ status: 'scheduled', attempts: 1 });
      const delay = task.runAt.getTime() - T0.getTime();
      if (expected === 'backoff') expect(delay, `delay ${ms}`).toBeLessThanOrEqual(10_000);
      else expect(delay, `delay ${ms}`).toBe(expected);
    }
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

  it("a handler's signal is aborted once its attempt is over", async () => {
    const [r] = await h.enqueue({ task: 'leaves-work', timeout: 0.05 }, { now: T0 });
    await round(T0);
    expect((aborted!.reason as Error).message).toBe('attempt finished');
    expect(await getTask(t.db, 'acme', r!.task!.id)).toMatchObject({ status: 'succeeded', lastError: null });
  });

  it('an at_most_once task that fails is not retried', async () => {
    const [r] = await h.enqueue({ task: 'poison', delivery: 'at_most_once', maxAttempts: 5 }, { now: T0 });
    await round(T0);
    expect(await getTask(t.db, 'acme', r!.task!.id)).toMatchObject({ status: 'dead', attempts: 1, lastError: 'boom' });
  });
});
