// Replay, bulk cancel and schedule triggers at the statement level: each
// guard of tasks_replay_terminal, tasks_cancel_matching_if_not_started and
// schedules_trigger_occurrence, over a real database.
import { beforeEach, describe, expect, it } from 'vitest';
import { countStatements } from '../../src/db/seam.ts';
import { replayTerminalTasks } from '../../src/db/sql/replay.ts';
import { insertTriggeredOccurrence } from '../../src/db/sql/trigger.ts';
import { getTask, listTasks } from '../../src/db/sql/tasks-read.ts';
import { cancelMatching } from '../../src/tasks/bulkCancel.ts';
import { replayMatching, replayTask } from '../../src/tasks/replay.ts';
import { triggerSchedule } from '../../src/schedules/trigger.ts';
import { resetTables, T0, at, useTestDatabase } from '../helpers/db.ts';
import { createHarness, type Harness } from '../helpers/harness.ts';
import { createTestApi } from '../helpers/http.ts';

const t = useTestDatabase();
let h: Harness;
const deps = () => ({ db: t.db, config: h.config });

beforeEach(async () => {
  await resetTables(t.db);
  h = createHarness(t.db);
});

type Seed = 'scheduled' | 'queued' | 'running' | 'started' | 'succeeded' | 'dead' | 'cancelled' | 'missed';

/** Inserts `n` tasks of one state in one statement; their ids, ascending. */
async function seed(state: Seed, o: { tenant?: string; n?: number; queue?: string; task?: string; createdAt?: Date } = {}): Promise<string[]> {
  const rows = await t.db.query<{ id: string }>(
    `insert into tasks (tenant, queue, task, payload, status, run_at, created_at, updated_at, finished_at, vtime,
                        claimed_by, lease_epoch, lease_expires_at, started_at, attempts, max_attempts,
                        backoff_base_ms, backoff_max_ms, timeout_ms, delivery, last_error)
     select $1::text, $3::text, $4::text, jsonb_build_object('i', g), $2::text,
            $5::timestamptz, $5::timestamptz, $5::timestamptz,
            case when $2::text in ('succeeded', 'dead', 'cancelled', 'missed') then $5::timestamptz end,
            case when $2::text = 'queued' then g::double precision end,
            case when $2::text = 'running' then 'w' end,
            case when $2::text = 'running' then 1 else 0 end,
            case when $2::text = 'running' then $5::timestamptz + interval '1 hour' end,
            case when $7::boolean then $5::timestamptz end,
            case when $2::text in ('running', 'succeeded', 'dead') then 1 else 0 end,
            3, 2000, 60000, 5000, 'at_most_once', case when $2::text = 'dead' then 'boom' end
     from generate_series(1, $6::int) g
     returning id`,
    [o.tenant ?? 'acme', state === 'started' ? 'running' : state, o.queue ?? 'default', o.task ?? 'noop', o.createdAt ?? T0, o.n ?? 1, state === 'started'],
  );
  return rows.map((r) => String(r.id));
}
const row = async (id: string) => (await t.db.query<Record<string, unknown>>(`select * from tasks where id = $1::bigint`, [id]))[0]!;
const count = async (where = 'true') => (await t.db.query<{ n: number }>(`select count(*)::int as n from tasks where ${where}`))[0]!.n;

describe('replay (tasks_replay_terminal)', () => {
  it('replays each terminal status as a new task with the same type, payload, queue and options; the original never changes', async () => {
    for (const status of ['succeeded', 'dead', 'cancelled', 'missed'] as const) {
      const [id] = await seed(status, { queue: 'mail', task: 'noop' });
      const before = await row(id!);
      const r = await replayTask(deps(), 'acme', id!, {}, at(5));
      expect(r.outcome).toBe('created');
      expect(r.task).toMatchObject({
        tenant: 'acme', queue: 'mail', task: 'noop', payload: { i: 1 }, status: 'queued', replayOf: id,
        idempotencyKey: null, attempts: 0, maxAttempts: 3, backoffBaseMs: 2000, backoffMaxMs: 60000, timeoutMs: 5000,
        delivery: 'at_most_once', runAt: at(5), createdAt: at(5), lastError: null, scheduleId: null,
      });
      expect(await row(id!)).toEqual(before);
    }
  });

  it('is born queued with a vtime within the look-ahead, scheduled beyond it, at runAt or after delay', async () => {
    const ids = await seed('dead', { n: 3 });
    const soon = await replayTask(deps(), 'acme', ids[0]!, { delay: 30 }, T0);
    expect(soon.task).toMatchObject({ status: 'queued', runAt: at(30) });
    expect((await row(soon.task.id)).vtime).not.toBeNull();
    const later = await replayTask(deps(), 'acme', ids[1]!, { runAt: at(3600) }, T0);
    expect(later.task).toMatchObject({ status: 'scheduled', runAt: at(3600) });
    expect((await row(later.task.id)).vtime).toBeNull();
    // Due now: the sweep claims and runs it.
    const now = await replayTask(deps(), 'acme', ids[2]!, {}, T0);
    await h.drain({ now: T0 });
    expect(await getTask(t.db, 'acme', now.task.id)).toMatchObject({ status: 'succeeded', attempts: 1 });
  });

  it('refuses a task that has not finished (409) and writes nothing', async () => {
    await seed('dead'); // a bystander the statement must not take instead
    for (const state of ['scheduled', 'queued', 'running', 'started'] as const) {
      const [id] = await seed(state);
      await expect(replayTask(deps(), 'acme', id!, {}, T0)).rejects.toMatchObject({ code: 'conflict' });
    }
    expect(await count('replay_of is not null')).toBe(0);
  });

  it("answers 404 for another tenant's task and an unknown id, and writes nothing", async () => {
    const [id] = await seed('dead', { tenant: 'victim' });
    await expect(replayTask(deps(), 'intruder', id!, {}, T0)).rejects.toMatchObject({ code: 'not_found' });
    await expect(replayTask(deps(), 'intruder', '987654321', {}, T0)).rejects.toMatchObject({ code: 'not_found' });
    expect(await replayTerminalTasks(t.db, { tenant: 'intruder', lookaheadSeconds: 60, match: { ids: [id!] }, limit: 10, maxPendingTasks: 1000 })).toEqual([]);
    expect(await count('replay_of is not null')).toBe(0);
  });

  it('makes one replay per task: again, and concurrently, the existing replay comes back', async () => {
    const [id] = await seed('dead');
    const first = await replayTask(deps(), 'acme', id!, {}, T0);
    const again = await replayTask(deps(), 'acme', id!, {}, at(1));
    expect(again).toEqual({ outcome: 'existing', task: first.task });

    const [other] = await seed('succeeded');
    const dbs = await Promise.all(Array.from({ length: 6 }, () => t.open({ maxConnections: 1 })));
    const results = await Promise.all(dbs.map((db) => replayTask({ db, config: h.config }, 'acme', other!, {}, T0)));
    expect(results.filter((r) => r.outcome === 'created')).toHaveLength(1);
    expect(new Set(results.map((r) => r.task.id)).size).toBe(1);
    expect(await count(`replay_of = ${other}`)).toBe(1);
    // A replay that finished can itself be replayed.
    await h.drain({ now: T0 });
    const chained = await replayTask(deps(), 'acme', first.task.id, {}, at(2));
    expect(chained).toMatchObject({ outcome: 'created', task: { replayOf: first.task.id } });
  });

  it('bulk: matches by each filter field, terminal tasks only, within the tenant', async () => {
    const mail = await seed('dead', { queue: 'mail' });
    const report = await seed('dead', { task: 'report' });
    const old = await seed('succeeded', { createdAt: at(-3600) });
    const fresh = await seed('cancelled', { createdAt: at(3600) });
    const missed = await seed('missed');
    await seed('queued');
    await seed('started');
    const theirs = await seed('dead', { tenant: 'other' });
    const replayed = async (match: Parameters<typeof replayMatching>[2]) =>
      (await replayMatching(deps(), 'acme', match, 100, T0)).ids;
    expect(await replayed({ queue: 'mail' })).toEqual(mail);
    expect(await replayed({ task: 'report' })).toEqual(report);
    expect(await replayed({ createdBefore: at(-1) })).toEqual(old);
    expect(await replayed({ createdAfter: at(1) })).toEqual(fresh);
    expect(await replayed({ statuses: ['missed'] })).toEqual(missed);
    expect(await replayed({ ids: theirs })).toEqual([]);
    expect(await replayed({ statuses: ['queued', 'running', 'scheduled'] })).toEqual([]);
    expect(await count(`tenant = 'other' and replay_of is not null`)).toBe(0);
  });

  it('bulk: continues where the last call stopped, in statements of at most 1,000, nothing twice', async () => {
    const ids = await seed('dead', { n: 2500 });
    const counted = countStatements(t.db);
    const calls: string[][] = [];
    for (const [limit, statements] of [[1500, 2], [600, 1], [1000, 1], [1000, 1]] as const) {
      counted.reset();
      calls.push((await replayMatching({ db: counted.db, config: h.config }, 'acme', { statuses: ['dead'] }, limit, T0)).ids);
      expect(counted.counts.byName).toEqual({ tasks_replay_terminal: statements });
    }
    expect(calls.map((c) => c.length)).toEqual([1500, 600, 400, 0]);
    expect(calls.flat()).toEqual(ids);
    expect(await count('replay_of is not null')).toBe(2500);
    // Born queued with vtimes that follow the originals' order.
    const v = await t.db.query<{ vtime: number }>(`select vtime from tasks where replay_of is not null order by replay_of`);
    expect(v.map((r) => r.vtime)).toEqual([...v.map((r) => r.vtime)].sort((a, b) => a - b));
    expect(new Set(v.map((r) => r.vtime)).size).toBe(2500);
  });
});

describe('bulk cancel (tasks_cancel_matching_if_not_started)', () => {
  it('cancels waiting and claimed-early tasks, never started or finished ones, within the tenant', async () => {
    const waiting = [...(await seed('scheduled')), ...(await seed('queued')), ...(await seed('running'))];
    const started = await seed('started');
    const done = await seed('succeeded');
    const theirs = await seed('scheduled', { tenant: 'other' });
    expect(await cancelMatching(t.db, 'intruder', { ids: [...waiting, ...theirs] }, 100, T0)).toEqual([]);
    const ids = await cancelMatching(t.db, 'acme', { ids: [...waiting, ...started, ...done, ...theirs] }, 100, at(1));
    expect(ids).toEqual(waiting);
    expect(await row(started[0]!)).toMatchObject({ status: 'running' });
    expect(await row(theirs[0]!)).toMatchObject({ status: 'scheduled' });
    for (const id of waiting) expect(await row(id)).toMatchObject({ status: 'cancelled', finished_at: at(1), lease_expires_at: null });
  });

  it('a task claimed early and sent with a delay is cancelled; the consumer then skips it', async () => {
    const [r] = await h.enqueue({ task: 'noop', delay: 30 }, { now: T0 });
    await h.sweep({ now: T0 });
    const [m] = h.outbox.take();
    // The list shows it queued, and the filter takes the status the list shows.
    expect((await listTasks(t.db, 'acme', { statuses: ['queued'], limit: 10 })).map((x) => x.id)).toEqual([r!.task!.id]);
    expect(await cancelMatching(t.db, 'acme', { statuses: ['running'] }, 10, at(5))).toEqual([]);
    expect(await cancelMatching(t.db, 'acme', { statuses: ['queued'] }, 10, at(5))).toEqual([r!.task!.id]);
    const out = await h.consume([m!.body], { now: at(30) });
    expect(out.results).toEqual([]);
    expect(await getTask(t.db, 'acme', r!.task!.id)).toMatchObject({ status: 'cancelled', startedAt: null });
  });

  it('continues where the last call stopped, nothing twice; skips a row another transaction holds', async () => {
    const ids = await seed('scheduled', { n: 2500 });
    const calls: string[][] = [];
    for (let i = 0; i < 3; i++) calls.push(await cancelMatching(t.db, 'acme', { queue: 'default' }, 1000, T0));
    expect(calls.map((c) => c.length)).toEqual([1000, 1000, 500]);
    expect(calls.flat()).toEqual(ids);

    const [held, free] = await seed('queued', { n: 2 });
    const other = await t.open({ maxConnections: 1 });
    await other.transaction(async (tx) => {
      await tx.query(`select id from tasks where id = $1::bigint for update`, [held]);
      // Does not wait on the lock: the held row is left for a later call.
      expect(await cancelMatching(t.db, 'acme', { statuses: ['queued'] }, 10, T0)).toEqual([free]);
    });
    expect(await cancelMatching(t.db, 'acme', { statuses: ['queued'] }, 10, T0)).toEqual([held]);
  });
});

describe('trigger (schedules_trigger_occurrence)', () => {
  const put = async (name: string, body: Record<string, unknown>, tenant = 'acme') => {
    const api = createTestApi(t.db);
    api.setNow(T0);
    const r = await api.admin('PUT', `/v1/schedules/${name}`, { tenant, body: { task: 'noop', ...body } });
    expect(r.status, JSON.stringify(r.body)).toBeLessThan(300);
  };
  const schedule = async (name: string) => (await t.db.query(`select * from schedules where name = $1::text`, [name]))[0]!;

  it('runs a paused schedule now without moving it', async () => {
    await put('nightly', { cron: '0 3 * * *', enabled: false, payload: { n: 1 }, maxAttempts: 2, queue: 'jobs' });
    const before = await schedule('nightly');
    const task = await triggerSchedule(deps(), 'acme', 'nightly', at(7.5));
    expect(task).toMatchObject({ status: 'queued', runAt: at(7.5), scheduledFor: at(7.5), payload: { n: 1 }, maxAttempts: 2, queue: 'jobs', scheduleId: String(before.id) });
    expect(await schedule('nightly')).toEqual(before);
    await h.drain({ now: at(8) });
    expect(await getTask(t.db, 'acme', task.id)).toMatchObject({ status: 'succeeded' });
  });

  it('never takes a fire time of the schedule, which still fires', async () => {
    await put('noon', { cron: '0 12 * * *' }); // T0 is 12:00:00.000: the next fire is tomorrow's
    await t.db.query(`update schedules set next_run_at = $1::timestamptz`, [T0]);
    const task = await triggerSchedule(deps(), 'acme', 'noon', T0);
    expect(task.scheduledFor).toEqual(new Date(T0.getTime() + 1));
    await h.sweep({ now: T0 });
    const occ = await t.db.query<{ scheduled_for: Date }>(`select scheduled_for from tasks order by scheduled_for`);
    expect(occ.map((o) => o.scheduled_for)).toEqual([T0, new Date(T0.getTime() + 1)]);
  });

  it('two triggers in the same millisecond, even concurrent, make distinct occurrences', async () => {
    await put('hourly', { interval: 3600 });
    const dbs = await Promise.all(Array.from({ length: 5 }, () => t.open({ maxConnections: 1 })));
    const tasks = await Promise.all(dbs.map((db) => triggerSchedule({ db, config: h.config }, 'acme', 'hourly', T0)));
    expect(new Set(tasks.map((x) => x.scheduledFor!.getTime())).size).toBe(5);
    expect(await count('schedule_id is not null')).toBe(5);
  });

  it("answers 404 for another tenant's schedule; the statement writes nothing for another tenant", async () => {
    await put('mine', { interval: 60 });
    await expect(triggerSchedule(deps(), 'intruder', 'mine', T0)).rejects.toMatchObject({ code: 'not_found' });
    const s = await schedule('mine');
    expect(await insertTriggeredOccurrence(t.db, { tenant: 'intruder', scheduleId: String(s.id), lookaheadSeconds: 60, slots: [T0], maxPendingTasks: 1000 })).toBeNull();
    expect(await count()).toBe(0);
  });

  it('a slot already taken is skipped within one statement', async () => {
    await put('slots', { interval: 3600 });
    const s = await schedule('slots');
    const a = await insertTriggeredOccurrence(t.db, { tenant: 'acme', scheduleId: String(s.id), lookaheadSeconds: 60, slots: [T0, at(0.001)], now: T0, maxPendingTasks: 1000 });
    const b = await insertTriggeredOccurrence(t.db, { tenant: 'acme', scheduleId: String(s.id), lookaheadSeconds: 60, slots: [T0, at(0.001)], now: T0, maxPendingTasks: 1000 });
    const c = await insertTriggeredOccurrence(t.db, { tenant: 'acme', scheduleId: String(s.id), lookaheadSeconds: 60, slots: [T0, at(0.001)], now: T0, maxPendingTasks: 1000 });
    expect([a?.scheduledFor, b?.scheduledFor, c]).toEqual([T0, at(0.001), null]);
  });
});
