// Issue 11 (S22, S23): the look-ahead is invisible. A task the sweep claimed
// early and sent with a delay is, for every user action, still waiting until
// its handler starts: reschedule by key, pause of its queue or its schedule,
// replacing or deleting its schedule. Each statement's guard has a test here
// that goes red when the guard is removed.
import { beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import type { Db } from '../../src/db/seam.ts';
import { fireOccurrences, lockDueSchedules } from '../../src/db/sql/schedules.ts';
import { listAttempts } from '../../src/db/sql/attempts.ts';
import { getTask } from '../../src/db/sql/tasks-read.ts';
import { startIfClaimed } from '../../src/db/sql/tasks-fence.ts';
import { defineTask } from '../../src/handlers/registry.ts';
import { planOccurrences } from '../../src/schedules/materialize.ts';
import { deleteSchedule, pauseSchedule } from '../../src/schedules/service.ts';
import { cancelTask } from '../../src/tasks/cancel.ts';
import { useTestDatabase, resetTables, T0, at } from '../helpers/db.ts';
import { createHarness, type Harness } from '../helpers/harness.ts';
import { createTestApi } from '../helpers/http.ts';
import { expectNoLoss, expectOneCompletion } from '../helpers/invariants.ts';

const t = useTestDatabase();
let pool: Db[] = [];
let h: Harness;
let api: ReturnType<typeof createTestApi>;
let runs: { id: string; payload: unknown; epoch: number; attempt: number }[];

/** A task type that records each run with its payload. */
const recordTask = () =>
  defineTask('record', z.object({ v: z.number() }), async (payload, ctx) => {
    runs.push({ id: ctx.taskId, payload, epoch: ctx.epoch, attempt: ctx.attempt });
  });

beforeAll(async () => {
  pool = await Promise.all(Array.from({ length: 4 }, () => t.open({ maxConnections: 6 })));
});
beforeEach(async () => {
  await resetTables(t.db);
  runs = [];
  // Info level: a test reads the refused start's log line.
  h = createHarness(t.db, { handlers: [recordTask()], config: { logLevel: 'info' } });
  api = createTestApi(t.db, { handlers: [recordTask()] });
  api.setNow(T0);
});

const row = (id: string) =>
  t.db.query<{ status: string; lease_epoch: string; attempts: number; vtime: number | null; dispatched_at: Date | null; payload: unknown }>(
    `select status, lease_epoch, attempts, vtime, dispatched_at, payload from tasks where id = $1::bigint`,
    [id],
  ).then((r) => r[0]!);

describe('reschedule by idempotency key, after the look-ahead claimed and sent the task', () => {
  for (const lead of [5, 30, 59]) {
    it(`${lead} s before its due time: one run, at the new time, with the new payload`, async () => {
      const [a] = await h.enqueue({ task: 'record', payload: { v: 1 }, delay: lead, idempotencyKey: 'debounce' }, { now: T0 });
      await h.sweep({ now: T0 });
      const [sent] = h.outbox.take();
      expect(sent!.body).toMatchObject({ id: a!.task!.id, epoch: 1 });
      expect(await row(a!.task!.id)).toMatchObject({ status: 'running', attempts: 1 });
      const before = await row(a!.task!.id);

      // The user pushes it back by 100 s: not spent, rescheduled (200 without deduplicated).
      const reply = await api.admin('POST', '/v1/tasks', {
        tenant: 'acme',
        body: { task: 'record', payload: { v: 2 }, runAt: at(lead + 100).toISOString(), idempotencyKey: 'debounce' },
      });
      expect(reply.status).toBe(200);
      expect(reply.body.deduplicated).toBeUndefined();
      expect(reply.body).toMatchObject({ id: a!.task!.id, status: 'scheduled', attempts: 0, dispatch: null, payload: { v: 2 } });
      // The claim is undone: epoch bumped (the message in flight is stale), the attempt refunded.
      expect(await row(a!.task!.id)).toMatchObject({ status: 'scheduled', lease_epoch: '2', attempts: 0, dispatched_at: null, vtime: null });
      expect(before.lease_epoch).toBe('1');

      // The old message arrives at the old time: acknowledged and skipped.
      const old = await h.consume([sent!.body], { now: at(lead) });
      expect(old).toMatchObject({ verdicts: ['ack'], results: [], skipped: 1 });
      expect(runs).toEqual([]);

      // At the new time it runs once, with the new payload.
      await h.drain({ now: at(lead + 100) });
      expect(runs).toEqual([{ id: a!.task!.id, payload: { v: 2 }, epoch: 3, attempt: 1 }]);
      expect(await getTask(t.db, 'acme', a!.task!.id)).toMatchObject({ status: 'succeeded', attempts: 1, startedAt: at(lead + 100) });
      await expectNoLoss(t.db, at(lead + 100));
      await expectOneCompletion(t.db);
    });
  }

  it('rescheduled to within the look-ahead it is queued again, keeping its vtime, and runs once', async () => {
    const [a] = await h.enqueue({ task: 'record', payload: { v: 1 }, delay: 30, idempotencyKey: 'k' }, { now: T0 });
    await h.sweep({ now: T0 });
    const [sent] = h.outbox.take();
    const { vtime } = await row(a!.task!.id);
    const [b] = await h.enqueue({ task: 'record', payload: { v: 2 }, delay: 40, idempotencyKey: 'k' }, { now: at(10) });
    expect(b).toMatchObject({ outcome: 'rescheduled', task: { status: 'queued', epoch: 2, attempts: 0, runAt: at(50) } });
    expect((await row(a!.task!.id)).vtime).toBe(vtime);
    await h.consume([sent!.body], { now: at(30) });
    await h.drain({ now: at(50) });
    expect(runs).toEqual([{ id: a!.task!.id, payload: { v: 2 }, epoch: 3, attempt: 1 }]);
  });

  it('once the handler has started, the key is spent: deduplicated, nothing changes', async () => {
    await h.enqueue({ task: 'record', payload: { v: 1 }, delay: 5, idempotencyKey: 'k' }, { now: T0 });
    await h.sweep({ now: T0 });
    const [sent] = h.outbox.take();
    const started = await startIfClaimed(t.db, { now: at(5), tasks: [sent!.body], leaseGraceSeconds: 30 });
    expect(started.started).toHaveLength(1);
    const [b] = await h.enqueue({ task: 'record', payload: { v: 2 }, delay: 100, idempotencyKey: 'k' }, { now: at(6) });
    expect(b).toMatchObject({ outcome: 'deduplicated', task: { status: 'running', epoch: 1, attempts: 1, payload: { v: 1 }, runAt: at(5) } });
  });

  for (const arrival of [
    { name: 'on time', at: 30 },
    // The first start finds it early; the start after the wait races the reschedule too.
    { name: 'delivered 1.5 s early, waiting out its run_at', at: 28.5 },
  ]) {
    it(`S23: a reschedule racing the consumer start (message ${arrival.name}), 200 times: exactly one wins, never both, never neither`, async () => {
      const n = 200;
      const inputs = Array.from({ length: n }, (_, i) => ({ task: 'record', payload: { v: 1 }, delay: 30, idempotencyKey: `race-${i}` }));
      const created = await h.enqueue(inputs, { now: T0 });
      await h.sweep({ now: T0 });
      const sent = new Map(h.outbox.take().map((m) => [m.body.id, m.body]));
      expect(sent.size).toBe(n);
      const verdicts = { startWon: 0, rescheduleWon: 0 };
      for (let i = 0; i < n; i += 10) {
        await Promise.all(
          created.slice(i, i + 10).map(async (c, j) => {
            const id = c!.task!.id;
            const consumer = createHarness(pool[j % pool.length]!, { handlers: [recordTask()] });
            const user = createHarness(pool[(j + 1) % pool.length]!, { handlers: [recordTask()] });
            const [consumed, [rescheduled]] = await Promise.all([
              consumer.consume([sent.get(id)!], { now: at(arrival.at) }),
              user.enqueue({ task: 'record', payload: { v: 2 }, delay: 40, idempotencyKey: `race-${i + j}` }, { now: at(29) }),
            ]);
            const ran = consumed.results.length === 1;
            if (ran) {
              expect(rescheduled!.outcome, id).toBe('deduplicated');
              verdicts.startWon++;
            } else {
              expect(consumed.skipped, id).toBe(1);
              expect(rescheduled!.outcome, id).toBe('rescheduled');
              expect(rescheduled!.task).toMatchObject({ epoch: 2, attempts: 0, payload: { v: 2 } });
              verdicts.rescheduleWon++;
            }
          }),
        );
      }
      expect(verdicts.startWon + verdicts.rescheduleWon).toBe(n);
      // Never started before its run_at, whenever the message arrived.
      expect(await t.db.query(`select id from tasks where started_at < run_at`)).toEqual([]);
      const ranIds = new Set(runs.map((r) => r.id));
      expect(runs).toHaveLength(verdicts.startWon); // never twice
      // The rescheduled ones run once, later, with the new payload.
      await h.drain({ now: at(100) });
      expect(runs).toHaveLength(n);
      expect(new Set(runs.map((r) => r.id)).size).toBe(n);
      expect(runs.filter((r) => !ranIds.has(r.id)).every((r) => (r.payload as { v: number }).v === 2)).toBe(true);
      await expectNoLoss(t.db, at(100));
      await expectOneCompletion(t.db);
    });
  }
});

describe('a message delivered before its run_at (the Queue rounds the delay down): nothing starts before it', () => {
  /** A task due at 12:00:30, claimed early; its message in flight. */
  const claimedEarly = async (input: Record<string, unknown> = {}) => {
    const [a] = await h.enqueue({ task: 'record', payload: { v: 1 }, delay: 30, ...input }, { now: T0 });
    await h.sweep({ now: T0 });
    const [sent] = h.outbox.take();
    return { id: a!.task!.id, body: sent!.body };
  };
  const startedAt = async (id: string) =>
    (await t.db.query<{ started_at: Date | null }>(`select started_at from tasks where id = $1::bigint`, [id]))[0]!.started_at;

  it('delivered 1.5 s early: the fenced start leaves it waiting (shown queued), then starts it at its run_at', async () => {
    const { id, body } = await claimedEarly();
    const sleeps: number[] = [];
    const out = await h.consume([body], {
      now: at(28.5),
      sleep: async (ms) => {
        sleeps.push(ms);
        expect(await row(id)).toMatchObject({ status: 'running', attempts: 1 });
        expect(await startedAt(id)).toBeNull();
        const shown = await api.admin('GET', `/v1/tasks/${id}`, { tenant: 'acme' });
        expect(shown.body).toMatchObject({ status: 'queued', attempts: 0, startedAt: null, dispatch: { epoch: 1 } });
      },
    });
    expect(sleeps).toEqual([1500]);
    expect(out).toMatchObject({ verdicts: ['ack'], results: [{ id, outcome: 'succeeded', status: 'succeeded' }], skipped: 0 });
    expect(runs).toEqual([{ id, payload: { v: 1 }, epoch: 1, attempt: 1 }]);
    expect(await getTask(t.db, 'acme', id)).toMatchObject({ status: 'succeeded', startedAt: at(30), attempts: 1 });
    // The wait is no attempt: the history holds the one run, not a skipped message before it.
    expect((await listAttempts(t.db, 'acme', id))!.attempts.map((a) => [a.attempt, a.outcome])).toEqual([[1, 'succeeded']]);
  });

  it('a reschedule by key in that window answers 200 (not deduplicated); the task runs once, at the new time, with the new payload', async () => {
    const { id, body } = await claimedEarly({ idempotencyKey: 'debounce' });
    const out = await h.consume([body], {
      now: at(28.5),
      sleep: async () => {
        api.setNow(at(29));
        const reply = await api.admin('POST', '/v1/tasks', {
          tenant: 'acme',
          body: { task: 'record', payload: { v: 2 }, runAt: at(90).toISOString(), idempotencyKey: 'debounce' },
        });
        expect(reply.status).toBe(200);
        expect(reply.body.deduplicated).toBeUndefined();
        expect(reply.body).toMatchObject({ id, status: 'scheduled', attempts: 0, payload: { v: 2 }, runAt: at(90).toISOString() });
      },
    });
    // The start after the wait finds the epoch moved: skipped as stale.
    expect(out).toMatchObject({ verdicts: ['ack'], results: [], skipped: 1 });
    expect(runs).toEqual([]);
    expect(await startedAt(id)).toBeNull();
    await h.drain({ now: at(60) });
    expect(runs).toEqual([]);
    await h.drain({ now: at(90) });
    expect(runs).toEqual([{ id, payload: { v: 2 }, epoch: 3, attempt: 1 }]);
    expect(await getTask(t.db, 'acme', id)).toMatchObject({ status: 'succeeded', startedAt: at(90) });
    await expectNoLoss(t.db, at(90));
    await expectOneCompletion(t.db);
  });

  it('a queue paused in that window: nothing starts; back in its queue, no attempt spent; it runs after the resume', async () => {
    const { id, body } = await claimedEarly();
    const out = await h.consume([body], {
      now: at(28.5),
      sleep: async () => {
        expect((await api.admin('PUT', '/v1/admin/queues/default', { body: { paused: true } })).status).toBe(200);
      },
    });
    expect(out).toMatchObject({ verdicts: ['ack'], results: [], skipped: 1 });
    expect(runs).toEqual([]);
    expect(await row(id)).toMatchObject({ status: 'queued', attempts: 0, dispatched_at: null });
    expect(await startedAt(id)).toBeNull();
    await h.drain({ now: at(40) });
    expect(runs).toEqual([]);
    await api.admin('PUT', '/v1/admin/queues/default', { body: { paused: false } });
    await h.drain({ now: at(41) });
    expect(runs).toEqual([{ id, payload: { v: 1 }, epoch: 2, attempt: 1 }]);
  });

  it('a queue already paused when the early message arrives: refused at once, no wait', async () => {
    const { id, body } = await claimedEarly();
    await api.admin('PUT', '/v1/admin/queues/default', { body: { paused: true } });
    const sleeps: number[] = [];
    const out = await h.consume([body], { now: at(28.5), sleep: async (ms) => void sleeps.push(ms) });
    expect(sleeps).toEqual([]);
    expect(out).toMatchObject({ verdicts: ['ack'], results: [], skipped: 1 });
    expect(await row(id)).toMatchObject({ status: 'queued', attempts: 0 });
  });

  it('too early to wait for in the invocation (10 s): retried with the delay left, untouched, and run once when redelivered', async () => {
    const { id, body } = await claimedEarly();
    const settled: [number, string, number | undefined][] = [];
    const out = await h.consume([body], { now: at(20), onSettled: (i, v, d) => void settled.push([i, v, d]) });
    // Delays are whole seconds, shortened by the Queue's batch timeout (1 s), as the sweep sends them.
    expect(settled).toEqual([[0, 'retry', 9]]);
    expect(out).toMatchObject({ verdicts: ['retry'], results: [], skipped: 0, deferred: 1 });
    expect(await row(id)).toMatchObject({ status: 'running', attempts: 1, lease_epoch: '1' });
    expect(await startedAt(id)).toBeNull();
    await h.drain({ now: at(29) }); // redelivered 1 s early: waited for, then started
    expect(runs).toEqual([{ id, payload: { v: 1 }, epoch: 1, attempt: 1 }]);
    expect(await getTask(t.db, 'acme', id)).toMatchObject({ status: 'succeeded', startedAt: at(30) });
  });

  it('early tasks due close together share one start after one wait; each starts at most 100 ms after its run_at', async () => {
    const dues = [0, 0.3, 0.35, 0.4, 1.5, 1.55];
    const created = await h.enqueue(
      dues.map((d, i) => ({ task: 'record', payload: { v: i }, runAt: at(10 + d) })),
      { now: T0 },
    );
    await h.sweep({ now: T0 });
    const sent = h.outbox.take();
    expect(sent).toHaveLength(dues.length);
    const sleeps: number[] = [];
    const out = await h.consume(sent.map((m) => m.body), { now: at(10), sleep: async (ms) => void sleeps.push(ms) });
    expect(out.results).toHaveLength(dues.length);
    // The due one at once; 0.3-0.4 s after one wait of 400 ms; 1.5-1.55 s after
    // 1150 ms more (the groups start one after another, in run_at order).
    expect(sleeps).toEqual([400, 1150]);
    const starts = await t.db.query<{ id: string; late_ms: number }>(
      `select id, (extract(epoch from started_at - run_at) * 1000)::float8 as late_ms from tasks order by id`,
    );
    expect(starts.map((s) => s.id)).toEqual(created.map((c) => c!.task!.id));
    for (const s of starts) {
      expect(s.late_ms).toBeGreaterThanOrEqual(0);
      expect(s.late_ms).toBeLessThanOrEqual(100);
    }
  });
});

describe('the invariant trigger (test/setup/invariants.sql)', () => {
  it('allows undoing an early claim (epoch + 1, attempt refunded) and nothing wider', async () => {
    const [a] = await h.enqueue({ task: 'record', payload: { v: 1 }, delay: 30 }, { now: T0 });
    await h.sweep({ now: T0 });
    const id = a!.task!.id;
    const undo = (set: string) => t.db.query(`update tasks set ${set}, lease_expires_at = null where id = $1::bigint`, [id]);
    // Epoch + 2, or no refund, or a started task: refused.
    await expect(undo(`status = 'scheduled', vtime = null, lease_epoch = lease_epoch + 2, attempts = attempts - 1`)).rejects.toThrow(/I3/);
    await expect(undo(`status = 'scheduled', vtime = null, lease_epoch = lease_epoch + 1`)).rejects.toThrow(/I3/);
    await t.db.query(`update tasks set started_at = run_at where id = $1::bigint`, [id]);
    await expect(undo(`status = 'queued', lease_epoch = lease_epoch + 1, attempts = attempts - 1`)).rejects.toThrow(/I3/);
    await t.db.query(`update tasks set started_at = null where id = $1::bigint`, [id]);
    await undo(`status = 'scheduled', vtime = null, lease_epoch = lease_epoch + 1, attempts = attempts - 1`);
    expect(await row(id)).toMatchObject({ status: 'scheduled', lease_epoch: '2', attempts: 0 });
  });
});

describe('pause a queue with tasks already sent', () => {
  it('the fenced start refuses them: back to queued, in order, no attempt spent; they run after the resume', async () => {
    const created = await h.enqueue(
      Array.from({ length: 5 }, (_, i) => ({ task: 'record', payload: { v: i }, delay: 20 })),
      { now: T0 },
    );
    await h.sweep({ now: T0 });
    const sent = h.outbox.take();
    expect(sent).toHaveLength(5);
    const vtimes = await t.db.query<{ id: string; vtime: number }>(`select id, vtime from tasks order by id`);

    expect((await api.admin('PUT', '/v1/admin/queues/default', { body: { paused: true } })).status).toBe(200);
    const out = await h.consume(sent.map((m) => m.body), { now: at(20) });
    expect(out.verdicts).toEqual(['ack', 'ack', 'ack', 'ack', 'ack']);
    expect(out.results).toEqual([]);
    expect(runs).toEqual([]);
    expect(h.logs.filter((l) => l.msg.startsWith('start refused: the queue is paused'))).toHaveLength(5);
    const after = await t.db.query<{ id: string; vtime: number; status: string; attempts: number; started_at: Date | null }>(
      `select id, vtime, status, attempts, started_at from tasks order by id`,
    );
    expect(after.map((r) => [r.id, r.vtime])).toEqual(vtimes.map((r) => [r.id, r.vtime]));
    expect(after.every((r) => r.status === 'queued' && r.attempts === 0 && r.started_at === null)).toBe(true);
    // Nothing is claimed while paused.
    await h.drain({ now: at(60) });
    expect(runs).toEqual([]);

    await api.admin('PUT', '/v1/admin/queues/default', { body: { paused: false } });
    const oneByOne = createHarness(t.db, { handlers: [recordTask()], config: { sweepBatchSize: 1 } });
    await oneByOne.drain({ now: at(61) });
    expect(runs.map((r) => r.id)).toEqual(created.map((c) => c!.task!.id));
    expect(runs.every((r) => r.attempt === 1)).toBe(true);
    await expectNoLoss(t.db, at(61));
  });

  it('a queue paused after the start does not stop a handler that already started', async () => {
    await h.enqueue({ task: 'record', payload: { v: 1 } }, { now: T0 });
    await h.sweep({ now: T0 });
    const [sent] = h.outbox.take();
    const out = await h.consume([sent!.body], {
      now: T0,
      faults: async (point) => {
        if (point === 'consume.after_start') await api.admin('PUT', '/v1/admin/queues/default', { body: { paused: true } });
      },
    });
    expect(out.results).toEqual([{ id: sent!.body.id, outcome: 'succeeded', status: 'succeeded' }]);
  });
});

describe('pause, replace and delete a schedule with occurrences already claimed', () => {
  // Created at 12:00:09: an interval of 3 s fires at 12:00:12, :15, ...; a
  // sweep at 12:00:10 plans and claims 12:00:12 ... 12:01:09 (20 occurrences).
  const put = async (name: string, body: Record<string, unknown>) => {
    const r = await api.admin('PUT', `/v1/schedules/${name}`, { tenant: 'acme', body: { task: 'record', ...body } });
    expect(r.status, JSON.stringify(r.body)).toBeLessThan(300);
    return r.body;
  };

  it('pause: nothing fires after it answers; resume applies the misfire policy from the pause time', async () => {
    api.setNow(at(9));
    await put('tick', { interval: 3, payload: { v: 1 } });
    await h.sweep({ now: at(10) });
    const sent = h.outbox.take();
    expect(sent.length).toBe(20); // every 3 s: 12, 15, ..., 69
    // The first one has started before the pause: it finishes.
    const first = await startIfClaimed(t.db, { now: at(12), tasks: [sent[0]!.body], leaseGraceSeconds: 30 });
    expect(first.started).toHaveLength(1);

    // Paused at 12:00:16: 12:00:15 is due but not started (cancelled, kept as
    // history); 12:00:18 ... 12:01:09 were planned early (withdrawn).
    api.setNow(at(16));
    const paused = await api.admin('POST', '/v1/schedules/tick/pause', { tenant: 'acme' });
    expect(paused.status).toBe(200);
    expect(paused.body).toMatchObject({ enabled: false, nextRunAt: at(18).toISOString() });
    // Every message in flight is skipped; nothing is materialized while paused.
    const out = await h.consume(sent.slice(1).map((m) => m.body), { now: at(70) });
    expect(out.results).toEqual([]);
    await h.drain({ now: at(70) });
    expect(runs).toEqual([]);
    const states = await t.db.query<{ status: string; n: number; at: Date[] }>(
      `select status, count(*)::int as n, array_agg(scheduled_for order by scheduled_for) as at from tasks group by 1 order by 1`,
    );
    expect(states).toEqual([
      { status: 'cancelled', n: 1, at: [at(15)] },
      { status: 'running', n: 1, at: [at(12)] },
    ]);

    // Resumed at 12:02:00 with run_once: the latest late time fires once, then the on-time ones.
    api.setNow(at(120));
    expect((await api.admin('POST', '/v1/schedules/tick/resume', { tenant: 'acme' })).body.enabled).toBe(true);
    await h.sweep({ now: at(120) });
    const occ = await t.db.query<{ scheduled_for: Date }>(
      `select scheduled_for from tasks where scheduled_for > $1::timestamptz order by scheduled_for limit 2`,
      [at(15)],
    );
    // 12:00:18 ... 12:00:57 are late (grace 60 s from 12:02:00): run_once keeps 12:00:57; 12:01:00 is on time.
    expect(occ.map((o) => o.scheduled_for.toISOString())).toEqual([at(57).toISOString(), at(60).toISOString()]);
  });

  for (const action of ['pause', 'delete'] as const) {
    it(`${action} locks the schedule first: occurrences a concurrent materialization commits are taken back too`, async () => {
      api.setNow(at(9));
      await put('tick', { interval: 3, payload: { v: 1 } });
      const materializer = pool[0]!;
      let acted: Promise<unknown> | undefined;
      await materializer.transaction(async (tx) => {
        const due = await lockDueSchedules(tx, { now: at(10), lookaheadSeconds: 60, limit: 10 });
        const plans = due.map((d) => planOccurrences(d.schedule, d.busy, d.now, 60));
        await fireOccurrences(tx, { now: at(10), occurrences: plans.flatMap((p) => p.occurrences), advances: plans.map((p) => p.advance) });
        // The pause (or delete) starts while this batch is uncommitted.
        acted = (action === 'pause' ? pauseSchedule : deleteSchedule)(pool[1]!, 'acme', 'tick', at(11));
        await new Promise((r) => setTimeout(r, 300));
      });
      expect(await acted).toMatchObject({ name: 'tick' });
      const left = await t.db.query(`select id from tasks where status in ('scheduled', 'queued', 'running')`);
      expect(left).toEqual([]);
      await h.drain({ now: at(100) });
      expect(runs).toEqual([]);
    });
  }

  it('replace: the next fire carries the new payload; messages in flight for the old definition are skipped', async () => {
    api.setNow(at(9));
    await put('tick', { interval: 3, payload: { v: 1 } });
    await h.sweep({ now: at(10) });
    const sent = h.outbox.take();
    api.setNow(at(11));
    await put('tick', { interval: 3, payload: { v: 2 } });
    const out = await h.consume(sent.map((m) => m.body), { now: at(12) });
    expect(out.results).toEqual([]);
    expect(runs).toEqual([]);
    await h.drain({ now: at(12) });
    expect(runs.length).toBeGreaterThan(0);
    expect(runs.every((r) => (r.payload as { v: number }).v === 2)).toBe(true);
    const first = await t.db.query<{ scheduled_for: Date; payload: unknown }>(
      `select scheduled_for, payload from tasks order by scheduled_for limit 1`,
    );
    expect(first).toEqual([{ scheduled_for: at(12), payload: { v: 2 } }]);
  });

  for (const action of ['pause', 'replace'] as const) {
    it(`${action} while an occurrence's message waits out its last 1.5 s: it does not start under the old definition`, async () => {
      api.setNow(at(9));
      await put('tick', { interval: 3, payload: { v: 1 } });
      await h.sweep({ now: at(10) });
      const sent = h.outbox.take();
      // 12:00:18's message arrives at 12:00:16.5: claimed, not started; the consumer waits.
      const early = sent[2]!.body;
      const out = await h.consume([early], {
        now: at(16.5),
        sleep: async (ms) => {
          expect(ms).toBe(1500);
          expect((await t.db.query(`select status, started_at from tasks where id = $1::bigint`, [early.id]))[0]).toEqual({
            status: 'running',
            started_at: null,
          });
          api.setNow(at(17));
          if (action === 'pause') expect((await api.admin('POST', '/v1/schedules/tick/pause', { tenant: 'acme' })).status).toBe(200);
          else await put('tick', { interval: 3, payload: { v: 2 } });
        },
      });
      // The late start finds the occurrence taken back: skipped, nothing ran.
      expect(out).toMatchObject({ verdicts: ['ack'], results: [], skipped: 1, deferred: 0 });
      expect(runs).toEqual([]);
      // Planned early and never started: withdrawn.
      expect(await t.db.query(`select status from tasks where id = $1::bigint`, [early.id])).toEqual([]);
      await h.drain({ now: at(18) });
      // Paused: nothing fires. Replaced: 12:00:18 fires once, under the new definition.
      if (action === 'pause') expect(runs).toEqual([]);
      else {
        expect(runs.length).toBeGreaterThan(0);
        expect(runs.every((r) => (r.payload as { v: number }).v === 2)).toBe(true);
        const at18 = await t.db.query(`select status, payload from tasks where scheduled_for = $1::timestamptz`, [at(18)]);
        expect(at18).toEqual([{ status: 'succeeded', payload: { v: 2 } }]);
      }
    });
  }

  it('delete: occurrences claimed early are cancelled, their messages skipped', async () => {
    api.setNow(at(9));
    await put('tick', { interval: 3, payload: { v: 1 } });
    await h.sweep({ now: at(10) });
    const sent = h.outbox.take();
    api.setNow(at(11));
    expect((await api.admin('DELETE', '/v1/schedules/tick', { tenant: 'acme' })).status).toBe(200);
    const out = await h.consume(sent.map((m) => m.body), { now: at(70) });
    expect(out.results).toEqual([]);
    const states = await t.db.query<{ status: string; n: number }>(`select status, count(*)::int as n from tasks group by 1`);
    expect(states).toEqual([{ status: 'cancelled', n: 20 }]);
  });
});

describe('what the owner sees of a task claimed early', () => {
  it('GET and listings show it queued with a dispatch field until it starts; status filters match what is shown', async () => {
    const [a] = await h.enqueue({ task: 'record', payload: { v: 1 }, delay: 30 }, { now: T0 });
    await h.sweep({ now: T0 });
    const [sent] = h.outbox.take();
    const got = await api.admin('GET', `/v1/tasks/${a!.task!.id}`, { tenant: 'acme' });
    expect(got.body).toMatchObject({
      status: 'queued',
      attempts: 0,
      dispatchedAt: null,
      startedAt: null,
      dispatch: { epoch: 1, dispatchedAt: expect.any(String) },
    });
    const queued = await api.admin('GET', '/v1/tasks?status=queued', { tenant: 'acme' });
    expect(queued.body.tasks.map((x: { id: string }) => x.id)).toEqual([a!.task!.id]);
    const running = await api.admin('GET', '/v1/tasks?status=running', { tenant: 'acme' });
    expect(running.body.tasks).toEqual([]);
    const stats = await api.admin('GET', '/v1/queues', { tenant: 'acme' });
    expect(stats.body.queues[0].counts).toMatchObject({ queued: 1, running: 0 });

    // Once started: running, the attempt counted, no dispatch field.
    await startIfClaimed(t.db, { now: at(30), tasks: [sent!.body], leaseGraceSeconds: 30 });
    const started = await api.admin('GET', `/v1/tasks/${a!.task!.id}`, { tenant: 'acme' });
    expect(started.body).toMatchObject({ status: 'running', attempts: 1, dispatch: null, dispatchedAt: expect.any(String) });
    expect((await api.admin('GET', '/v1/tasks?status=running', { tenant: 'acme' })).body.tasks).toHaveLength(1);
    expect((await api.admin('GET', '/v1/tasks?status=queued', { tenant: 'acme' })).body.tasks).toHaveLength(0);
  });

  it('cancel keeps working on a task claimed early', async () => {
    const [a] = await h.enqueue({ task: 'record', payload: { v: 1 }, delay: 30 }, { now: T0 });
    await h.sweep({ now: T0 });
    const [sent] = h.outbox.take();
    expect(await cancelTask(t.db, 'acme', { id: a!.task!.id }, at(1))).toMatchObject({ status: 'cancelled' });
    expect((await h.consume([sent!.body], { now: at(30) })).results).toEqual([]);
    expect(runs).toEqual([]);
  });
});
