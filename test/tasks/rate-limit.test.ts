// Flow control (issue 16): rate limits per key. GCRA without bursts: the
// claim reserves spaced starts, the fenced start enforces the line on the
// starts it records. Time travels by the override; nothing sleeps.
import { beforeEach, describe, expect, it } from 'vitest';
import { at, holdLocks, resetTables, T0, useTestDatabase } from '../helpers/db.ts';
import { createHarness, type Harness } from '../helpers/harness.ts';
import type { TaskInput } from '../../src/tasks/enqueue.ts';
import { countStatements } from '../../src/db/seam.ts';
import { claimTasks } from '../../src/db/sql/tasks-dispatch.ts';
import { startIfClaimed } from '../../src/db/sql/tasks-fence.ts';

const t = useTestDatabase();
let h: Harness;

beforeEach(async () => {
  await resetTables(t.db);
  h = createHarness(t.db);
});

const rated = (n: number, key = 'partner', limit = 5, periodSeconds = 1, extra: Partial<TaskInput> = {}): TaskInput[] =>
  Array.from({ length: n }, () => ({ task: 'noop', rateLimit: { key, limit, periodSeconds }, ...extra }));

interface Row {
  id: string;
  status: string;
  run_at: Date;
  started_at: Date | null;
  attempts: number;
}

const rows = async (key = 'partner', tenant = 'acme') =>
  t.db.query<Row>(
    `select id::text, status, run_at, started_at, attempts from tasks where tenant = $1::text and rate_key = $2::text order by id`,
    [tenant, key],
  );

/** The most starts any window of `periodMs` (half-open) holds, over the recorded starts. */
function maxInWindow(starts: readonly Date[], periodMs: number): number {
  const ms = starts.map((d) => d.getTime()).sort((a, b) => a - b);
  let best = 0;
  let lo = 0;
  for (let hi = 0; hi < ms.length; hi++) {
    while (ms[hi]! - ms[lo]! >= periodMs) lo++;
    best = Math.max(best, hi - lo + 1);
  }
  return best;
}

/** Sweeps at `now` and delivers everything sent, `rounds` times. */
async function cycle(now: Date, rounds = 3): Promise<void> {
  for (let i = 0; i < rounds; i++) {
    await h.sweep({ now });
    const sent = h.outbox.take();
    if (sent.length === 0) return;
    await h.deliver(sent, { now });
  }
}

describe('rate limits', () => {
  it('limit 5 per second: 23 tasks due at once start 200 ms apart, no window holds more than 5, one attempt each', async () => {
    await h.enqueue(rated(23), { now: T0 });
    await cycle(T0);
    const all = await rows();
    expect(all.every((r) => r.status === 'succeeded')).toBe(true);
    expect(all.every((r) => r.attempts === 1)).toBe(true);
    const starts = all.map((r) => r.started_at!).sort((a, b) => a.getTime() - b.getTime());
    // On schedule: the k-th start is T0 + k x 200 ms.
    expect(starts.map((s) => s.getTime() - T0.getTime())).toEqual(Array.from({ length: 23 }, (_, k) => k * 200));
    expect(maxInWindow(starts, 1000)).toBe(5);
    const state = await t.db.query<{ next_start_at: Date }>(
      `select next_start_at from rate_start_lines where tenant = 'acme' and key = 'partner'`,
    );
    expect(state[0]!.next_start_at.getTime()).toBe(at(23 * 0.2).getTime());
  });

  it('a backlog beyond the look-ahead goes back to scheduled at the time the limit allows, no attempt spent, and starts on schedule later', async () => {
    await h.enqueue(rated(400), { now: T0 });
    const counts = await h.sweep({ now: T0 });
    expect(counts).toBeDefined();
    const first = await rows();
    const claimed = first.filter((r) => r.status === 'running');
    const waiting = first.filter((r) => r.status === 'scheduled');
    // 60 s of look-ahead at 5 per second (a start at exactly now + 60 s is inside it).
    expect(claimed.length).toBe(301);
    expect(waiting.length).toBe(99);
    expect(waiting.every((r) => r.attempts === 0)).toBe(true);
    expect(Math.min(...waiting.map((r) => r.run_at.getTime()))).toBeGreaterThanOrEqual(at(60).getTime());
    await h.deliver(h.outbox.take(), { now: T0 });
    await cycle(at(30));
    await cycle(at(90));
    const all = await rows();
    expect(all.filter((r) => r.status !== 'succeeded')).toEqual([]);
    expect(all.every((r) => r.attempts === 1)).toBe(true);
    const starts = all.map((r) => r.started_at!);
    expect(maxInWindow(starts, 1000)).toBe(5);
    expect(Math.max(...starts.map((s) => s.getTime()))).toBe(at(399 * 0.2).getTime());
  });

  it('late deliveries never bunch: the fenced start spaces them, and a start pushed past its wait budget goes back queued, attempt refunded', async () => {
    await h.enqueue(rated(80), { now: T0 });
    await h.sweep({ now: T0 });
    const sent = h.outbox.take();
    expect(sent.length).toBe(80);
    // Every message arrives 20 s late, in one batch.
    const late = at(20);
    await h.consume(
      sent.map((m) => m.body),
      { now: late },
    );
    const after = await rows();
    const started = after.filter((r) => r.started_at !== null);
    const refused = after.filter((r) => r.status === 'queued');
    // 10 s of wait budget at 200 ms: 51 start (now, now + 0.2 s, ..., now + 10 s).
    expect(started.length).toBe(51);
    expect(refused.length).toBe(29);
    expect(refused.every((r) => r.attempts === 0)).toBe(true);
    expect(Math.min(...refused.map((r) => r.run_at.getTime()))).toBe(late.getTime() + 51 * 200);
    expect(maxInWindow(started.map((r) => r.started_at!), 1000)).toBe(5);
    // start_on_line_keeps_run_at: the place is recorded in started_at, never
    // before run_at, and run_at stays what the claim sent (a HOT update).
    const sentRunAt = new Map(sent.map((m) => [m.body.id, m.body.runAt]));
    for (const r of started) {
      expect(r.run_at.getTime()).toBe(sentRunAt.get(r.id));
      expect(r.started_at!.getTime()).toBeGreaterThanOrEqual(r.run_at.getTime());
    }
    await cycle(at(21));
    const all = await rows();
    expect(all.filter((r) => r.status !== 'succeeded')).toEqual([]);
    expect(all.every((r) => r.attempts === 1)).toBe(true);
    expect(maxInWindow(all.map((r) => r.started_at!), 1000)).toBe(5);
  });

  it('a line past the wait budget lets nothing through and stays, even for a start whose clock is older; the last place that fits moves it too', async () => {
    await h.enqueue(rated(80), { now: T0 });
    await h.sweep({ now: T0 });
    const sent = h.outbox.take().sort((x, y) => x.body.runAt - y.body.runAt);
    expect(sent.length).toBe(80);
    const [first, older, last] = [sent.slice(0, 60), sent.slice(60, 70), sent.slice(70)];
    // 51 start, 20 s late, at 20.0, 20.2, ..., 30.0 s (the last exactly at
    // the end of the 10 s budget): the line stands at 30.2 s.
    await h.consume(first.map((m) => m.body), { now: at(20) });
    expect((await rows()).filter((r) => r.started_at !== null).length).toBe(51);
    // A start whose statement began earlier (its now() is 19 s: it waited
    // for the line while the one above moved it) finds the line 1.2 s past
    // its budget: nothing fits, and the line stays at 30.2 s.
    await h.consume(older.map((m) => m.body), { now: at(19) });
    // At 20 s again the line is still 0.2 s past the budget: nothing starts
    // beside the start at 30.0 s.
    await h.consume(last.map((m) => m.body), { now: at(20) });
    const after = await rows();
    const started = after.filter((r) => r.started_at !== null);
    expect(started.length).toBe(51);
    expect(maxInWindow(started.map((r) => r.started_at!), 1000)).toBe(5);
    expect(after.filter((r) => r.status === 'queued').every((r) => r.attempts === 0 && r.run_at.getTime() >= at(30.2).getTime())).toBe(true);
    await cycle(at(21));
    const all = await rows();
    expect(all.filter((r) => r.status !== 'succeeded')).toEqual([]);
    expect(maxInWindow(all.map((r) => r.started_at!), 1000)).toBe(5);
  });

  it('a late message and the next one on time: the second waits for the line (starts stay a step apart)', async () => {
    await h.enqueue(rated(2, 'pair', 1, 1), { now: T0 });
    await h.sweep({ now: T0 });
    const [a, b] = h.outbox.take().sort((x, y) => x.body.runAt - y.body.runAt);
    expect(b!.body.runAt - a!.body.runAt).toBe(1000);
    // A arrives 600 ms late, B exactly on time.
    await h.consume([a!.body], { now: at(0.6) });
    const outcome = await h.consume([b!.body], { now: at(1) });
    expect(outcome.results.length).toBe(1);
    const all = await rows('pair');
    const starts = all.map((r) => r.started_at!.getTime() - T0.getTime()).sort((x, y) => x - y);
    expect(starts).toEqual([600, 1600]);
    expect(all.every((r) => r.status === 'succeeded' && r.attempts === 1)).toBe(true);
  });

  it("a hostile tenant's rate-limited backlog never holds back other keys or tenants", async () => {
    await h.enqueue(rated(2000, 'slow', 1, 60), { now: T0, tenant: 'hostile' });
    await h.enqueue(
      Array.from({ length: 150 }, () => ({ task: 'noop' })),
      { now: T0, tenant: 'good' },
    );
    await h.enqueue(rated(50, 'fast', 1000, 1), { now: T0, tenant: 'good' });
    await h.enqueue(rated(50, 'other', 100, 1), { now: T0, tenant: 'hostile' });
    await cycle(T0, 2);
    const good = await t.db.query<{ status: string; n: number }>(
      `select status, count(*)::int as n from tasks where tenant = 'good' group by status`,
    );
    expect(good).toEqual([{ status: 'succeeded', n: 200 }]);
    expect((await rows('other', 'hostile')).every((r) => r.status === 'succeeded')).toBe(true);
    const slow = await rows('slow', 'hostile');
    // One start a minute: two inside the look-ahead (now and now + 60 s), the
    // rest scheduled a minute apart, no attempt spent.
    expect(slow.filter((r) => r.status === 'succeeded').length).toBe(2);
    const waiting = slow.filter((r) => r.status !== 'succeeded');
    expect(waiting.every((r) => r.attempts === 0)).toBe(true);
    // Out of the runnable index: back to scheduled, no earlier than the line allows
    // (estimates; each claim reserves only what its look-ahead sends).
    expect(waiting.every((r) => r.status === 'scheduled')).toBe(true);
    expect(Math.min(...waiting.map((r) => r.run_at.getTime()))).toBeGreaterThanOrEqual(at(120).getTime());
  });

  it('the same key with different limits: the most recently enqueued task claimed sets the spacing', async () => {
    await h.enqueue(rated(3, 'k', 1, 1), { now: T0 });
    await h.enqueue(rated(3, 'k', 2, 1), { now: T0 });
    await cycle(T0);
    const starts = (await rows('k')).map((r) => r.started_at!.getTime() - T0.getTime()).sort((x, y) => x - y);
    expect(starts).toEqual([0, 500, 1000, 1500, 2000, 2500]);
    const [row] = await t.db.query<{ max_starts: number }>(`select max_starts from rate_limits where key = 'k'`);
    expect(row!.max_starts).toBe(2);
  });

  it('rate_limit_of_newest: older tasks of the key claimed after the newest one keep its limit, not their looser one', async () => {
    // Older: 100 per second, in queue b-old; the newest: 1 per 10 s, in
    // a-new, claimed first (queues take turns from a random one: 0 is a-new).
    await h.enqueue(rated(4, 'r', 100, 1, { queue: 'b-old' }), { now: T0 });
    await h.enqueue(rated(1, 'r', 1, 10, { queue: 'a-new' }), { now: T0 });
    await h.sweep({ now: T0, random: () => 0 });
    await h.deliver(h.outbox.take(), { now: T0 });
    await h.sweep({ now: at(30), random: () => 0 });
    await h.deliver(h.outbox.take(), { now: at(30) });
    const done = await rows('r');
    expect(done.map((r) => r.status)).toEqual(['succeeded', 'succeeded', 'succeeded', 'succeeded', 'succeeded']);
    expect(maxInWindow(done.map((r) => r.started_at!), 10_000)).toBe(1);
    expect(await t.db.query(`select max_starts, period_seconds from rate_limits where key = 'r'`)).toEqual([{ max_starts: 1, period_seconds: 10 }]);
  });

  it("rate_limit_of_newest: a claim of older tasks that waited on the newest one's claim keeps the newest limit", async () => {
    await h.enqueue(rated(4, 'r', 100, 1, { queue: 'b-old' }), { now: T0 });
    await h.enqueue(rated(1, 'r', 1, 10, { queue: 'a-new' }), { now: T0 });
    const [older, newer] = [await t.open({ maxConnections: 1 }), await t.open({ maxConnections: 1 })];
    try {
      await older.query(`set application_name = 'older-claim'`);
      let olderClaim: Promise<unknown> | undefined;
      await newer.transaction(async (tx) => {
        await claimTasks(tx, { now: T0, queue: 'a-new', limit: 10, claimedBy: 'newer', leaseSeconds: 60 });
        // The older claim read no row (this one is not committed) and waits on its key.
        olderClaim = claimTasks(older, { now: T0, queue: 'b-old', limit: 10, claimedBy: 'older', leaseSeconds: 60 });
        let waiting = false;
        for (let i = 0; i < 200 && !waiting; i++) {
          waiting = (await t.db.query(`select 1 from pg_stat_activity where application_name = 'older-claim' and wait_event_type = 'Lock'`)).length > 0;
          if (!waiting) await new Promise((r) => setTimeout(r, 25));
        }
        expect(waiting).toBe(true);
      });
      expect((await olderClaim) as { claimed: unknown[] }).toMatchObject({ claimed: expect.any(Array) });
      expect(await t.db.query(`select max_starts, period_seconds from rate_limits where key = 'r'`)).toEqual([{ max_starts: 1, period_seconds: 10 }]);
    } finally {
      await older.close();
      await newer.close();
    }
  });

  it('a duplicate delivery started twice at once starts each task once: the second finds them started behind the line', async () => {
    await h.enqueue(rated(10, 'dup', 100, 1), { now: T0 });
    await h.sweep({ now: T0 });
    const batch = h.outbox.take().map((m) => ({ id: m.body.id, epoch: m.body.epoch, rated: true }));
    expect(batch).toHaveLength(10);
    // Both starts read the tasks unstarted (rate_tasks takes no lock), then
    // queue on the key's line, held here until both wait.
    const release = await holdLocks(t, [[`insert into rate_start_lines (tenant, key) values ('acme', 'dup')`]]);
    const [one, two] = [await t.open({ maxConnections: 1, applicationName: 'dup-start' }), await t.open({ maxConnections: 1, applicationName: 'dup-start' })];
    try {
      const starts = [one, two].map((db) => startIfClaimed(db, { now: at(1), tasks: batch, leaseGraceSeconds: 30 }));
      let waiting = 0;
      for (let i = 0; i < 200 && waiting < 2; i++) {
        waiting = (await t.db.query(`select 1 from pg_stat_activity where application_name = 'dup-start' and wait_event_type = 'Lock'`)).length;
        if (waiting < 2) await new Promise((r) => setTimeout(r, 25));
      }
      expect(waiting).toBe(2);
      await release();
      const counts = (await Promise.all(starts)).map((r) => r.started.length);
      expect(counts.sort()).toEqual([0, 10]);
    } finally {
      await one.close();
      await two.close();
    }
    const all = await rows('dup');
    expect(all.every((r) => r.status === 'running' && r.attempts === 1 && r.started_at !== null)).toBe(true);
    expect(maxInWindow(all.map((r) => r.started_at!), 1000)).toBe(10);
    expect(maxInWindow(all.map((r) => r.started_at!), 10)).toBe(1);
  });

  it("rated_sent_by_key: a claim sends its rate-limited tasks after the rest, each key's together, so a consumer's batch starts on few lines", async () => {
    const inputs: TaskInput[] = [];
    for (let i = 0; i < 4; i++) inputs.push({ task: 'noop' }, ...rated(1, 'k-b', 1000), ...rated(1, 'k-a', 1000));
    const ids = (await h.enqueue(inputs, { now: T0 })).map((r) => r.task!.id);
    const keyOf = new Map(ids.map((id, i) => [id, inputs[i]!.rateLimit?.key ?? 'none']));
    await h.sweep({ now: T0 });
    const sent = h.outbox.take().map((m) => m.body.id);
    expect(sent.map((id) => keyOf.get(id))).toEqual([...Array(4).fill('none'), ...Array(4).fill('k-a'), ...Array(4).fill('k-b')]);
    // Within each group, the order they were enqueued (their vtimes).
    for (const key of ['none', 'k-a', 'k-b']) {
      const group = sent.filter((id) => keyOf.get(id) === key);
      expect(group).toEqual(ids.filter((id) => keyOf.get(id) === key));
    }
  });

  it("one claim of two tenants' tasks with the same key reserves each tenant's on its own line", async () => {
    await h.enqueue(rated(3, 'shared', 1, 10), { now: T0, tenant: 'a' });
    await h.enqueue(rated(3, 'shared', 1, 10), { now: T0, tenant: 'b' });
    await h.sweep({ now: T0 });
    const runAts = h.outbox.take().map((m) => m.body.runAt - T0.getTime()).sort((x, y) => x - y);
    expect(runAts).toEqual([0, 0, 10_000, 10_000, 20_000, 20_000]);
  });

  it("keys are per tenant: another tenant's tasks with the same key are not spaced by it", async () => {
    await h.enqueue(rated(3, 'shared', 1, 10), { now: T0, tenant: 'a' });
    await h.enqueue(rated(3, 'shared', 1, 10), { now: T0, tenant: 'b' });
    await cycle(T0);
    for (const tenant of ['a', 'b']) {
      const starts = (await rows('shared', tenant)).map((r) => r.started_at!.getTime() - T0.getTime()).sort((x, y) => x - y);
      expect(starts).toEqual([0, 10_000, 20_000]);
    }
  });

  it('messages say which tasks are rate-limited; a start without the word still keeps the line, one statement later', async () => {
    const counted = countStatements(t.db);
    const c = createHarness(counted.db);
    const starts = () => ({
      unrated: counted.counts.byName['tasks_start_if_claimed_unrated'] ?? 0,
      rated: counted.counts.byName['tasks_start_if_claimed'] ?? 0,
    });
    await c.enqueue([...rated(2, 'pair', 1, 1), { task: 'noop' }, { task: 'noop' }], { now: T0 });
    await c.sweep({ now: T0 });
    const sent = c.outbox.take().map((m) => m.body);
    const keyed = new Set((await rows('pair')).map((r) => r.id));
    expect(sent.map((m) => m.rated === true)).toEqual(sent.map((m) => keyed.has(m.id)));
    expect(keyed.size).toBe(2);

    // The plain ones, as sent: the statement without the lines, once.
    counted.reset();
    await c.consume(sent.filter((m) => !m.rated), { now: T0 });
    expect(starts()).toEqual({ unrated: 1, rated: 0 });

    // The rate-limited ones without the word (a message from before it), the
    // first a second late: the lean statement starts neither, the whole one
    // puts both on the line, a second apart.
    counted.reset();
    const bare = sent.filter((m) => m.rated).map(({ rated: _, ...m }) => m);
    const outcome = await c.consume(bare, { now: at(1) });
    expect(outcome.results.map((r) => r.status)).toEqual(['succeeded', 'succeeded']);
    expect(starts()).toEqual({ unrated: 1, rated: 1 });
    const line = (await rows('pair')).map((r) => r.started_at!.getTime() - T0.getTime()).sort((x, y) => x - y);
    expect(line).toEqual([1000, 2000]);
  });

  it('an early rate-limited message without the word starts, once due, by the whole statement alone', async () => {
    const counted = countStatements(t.db);
    const c = createHarness(counted.db);
    // Due in 500 ms: the look-ahead claims it now, and its message arrives at once.
    await c.enqueue(rated(1, 'pair', 1, 1, { runAt: at(0.5) }), { now: T0 });
    await c.sweep({ now: T0 });
    const [message] = c.outbox.take().map(({ body: { rated: _, ...m } }) => m);
    counted.reset();
    const outcome = await c.consume([message!], { now: T0 });
    expect(outcome.results.map((r) => r.status)).toEqual(['succeeded']);
    expect(counted.counts.byName['tasks_start_if_claimed_unrated']).toBe(1);
    expect(counted.counts.byName['tasks_start_if_claimed']).toBe(1);
    expect((await rows('pair'))[0]!.started_at!.getTime()).toBe(at(0.5).getTime());
  });

  it("a batch's starts spread over the line still share one finish statement", async () => {
    await h.enqueue(rated(6, 'partner', 10), { now: T0 });
    await h.sweep({ now: T0 });
    // Delivered late, all due: the start line places them 100 ms apart, and
    // the consumer waits for each (a tenth of it, in real time, under the override).
    await h.consume(h.outbox.take().map((m) => m.body), { now: at(1) });
    const all = await rows();
    expect(all.map((r) => r.started_at!.getTime() - at(1).getTime())).toEqual([0, 100, 200, 300, 400, 500]);
    const [calls] = await t.db.query<{ n: number }>(
      `select count(distinct xmin::text)::int as n from tasks where status = 'succeeded'`,
    );
    expect(calls!.n).toBe(1);
  });
});
