// Attempt history and results (issue 15): every attempt that ended is a row
// written by the statement that ended it (the finish, the reaper, the fenced
// start for a message it skipped), read through GET /v1/tasks/{id}/attempts,
// scoped by tenant and deleted with its task by retention. A handler's return
// value is the task's `result`.
import { beforeEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { listAttempts } from '../../src/db/sql/attempts.ts';
import { finishIfRunning, startIfClaimed } from '../../src/db/sql/tasks-fence.ts';
import { getTask } from '../../src/db/sql/tasks-read.ts';
import { purgeFinishedTasks } from '../../src/db/sql/tasks-maintenance.ts';
import { defineTask } from '../../src/handlers/registry.ts';
import { MAX_RESULT_BYTES } from '../../src/tasks/attempts.ts';
import { T0, at, resetTables, useTestDatabase } from '../helpers/db.ts';
import { crashAt, Crash } from '../helpers/faults.ts';
import { createHarness, type Harness } from '../helpers/harness.ts';
import { createTestApi } from '../helpers/http.ts';

const t = useTestDatabase();
let h: Harness;
let api: ReturnType<typeof createTestApi>;

const handlers = [
  // Attempt 1 fails, 2 hangs past its timeout, 3 is cut off (the test crashes
  // the consumer after the start), 4 succeeds with a result.
  defineTask('story', z.object({}).default({}), async (_p, ctx) => {
    if (ctx.attempt === 1) throw new TypeError('boom: cannot read "x" of undefined');
    if (ctx.attempt === 2) await new Promise<void>((resolve) => ctx.signal.addEventListener('abort', () => resolve()));
    return { attempt: ctx.attempt, ok: true, note: 'café ☕' };
  }),
  defineTask('returns', z.object({ value: z.unknown().optional(), big: z.int().optional(), cyclic: z.boolean().optional(), nul: z.boolean().optional() }), async (p) => {
    if (p.big !== undefined) return { blob: 'x'.repeat(p.big) };
    if (p.nul) return { s: 'a\u0000b' };
    if (p.cyclic) {
      const o: Record<string, unknown> = {};
      o.self = o;
      return o;
    }
    return p.value;
  }),
  defineTask('long-error', z.object({}).default({}), async () => {
    throw new Error(`${'é'.repeat(3000)}\u0000end`);
  }),
];

beforeEach(async () => {
  await resetTables(t.db);
  h = createHarness(t.db, { handlers });
  api = createTestApi(t.db, { handlers });
});

/** Sweeps at `now` and consumes what was sent. */
async function round(now: Date) {
  await h.sweep({ now });
  const sent = h.outbox.take();
  await h.consume(sent.map((m) => m.body), { now });
  return sent;
}
const attempts = async (id: string, tenant = 'acme') => api.admin('GET', `/v1/tasks/${id}/attempts`, { tenant });

describe('attempt history', () => {
  it('a task that failed, timed out, lost its lease, then succeeded shows those attempts in order', async () => {
    const [r] = await h.enqueue({ task: 'story', maxAttempts: 5, timeout: 0.05, backoff: { base: 1, max: 1 } }, { now: T0 });
    const id = r!.task!.id;
    expect((await attempts(id)).body).toEqual({ attempts: [] });

    expect(await round(T0)).toHaveLength(1); // 1: fails
    expect(await round(at(2))).toHaveLength(1); // 2: times out
    await h.sweep({ now: at(4) }); // 3: started, then the consumer dies
    const [m] = h.outbox.take();
    await expect(h.consume([m!.body], { now: at(4), faults: crashAt('consume.after_start') })).rejects.toThrow(Crash);
    await h.sweep({ now: at(200) }); // the reaper: lease expired, retried within the look-ahead
    expect(await round(at(202))).toHaveLength(1); // 4: succeeds
    expect(await getTask(t.db, 'acme', id)).toMatchObject({ status: 'succeeded', attempts: 4 });

    const reply = await attempts(id);
    expect(reply.status).toBe(200);
    const list = reply.body.attempts as Record<string, unknown>[];
    expect(list.map((a) => [a.attempt, a.outcome])).toEqual([
      [1, 'failed'],
      [2, 'timed_out'],
      [3, 'lease_expired'],
      [4, 'succeeded'],
    ]);
    expect(list.map((a) => a.epoch)).toEqual([1, 2, 3, 4]);
    expect(list[0]).toEqual({
      attempt: 1,
      epoch: 1,
      startedAt: T0.toISOString(),
      finishedAt: T0.toISOString(),
      durationMs: 0,
      outcome: 'failed',
      error: { name: 'TypeError', message: 'boom: cannot read "x" of undefined' },
    });
    expect(list[1]).toMatchObject({ startedAt: at(2).toISOString(), error: { name: 'TimeoutError', message: 'timed out after 50 ms' } });
    expect(list[2]).toMatchObject({
      startedAt: at(4).toISOString(),
      finishedAt: at(200).toISOString(),
      durationMs: 196_000,
      error: { name: 'LeaseExpired', message: expect.stringMatching(/lease expired/) },
    });
    expect(list[3]).toMatchObject({ error: null, finishedAt: at(202).toISOString() });
    expect(list.every((a) => !('status' in a))).toBe(true); // not an http task

    // The result of the success, on the task.
    const task = await api.admin('GET', `/v1/tasks/${id}`, { tenant: 'acme' });
    expect(task.body.result).toEqual({ attempt: 4, ok: true, note: 'café ☕' });
    expect(task.body.lastError).toMatch(/lease expired/);
  });

  it("another tenant's task is 404, like an unknown id; bad ids are 400 naming the field", async () => {
    const [r] = await h.enqueue({ task: 'story' }, { now: T0 });
    await round(T0);
    expect((await attempts(r!.task!.id)).body.attempts).toHaveLength(1);
    const other = await attempts(r!.task!.id, 'intruder');
    expect(other.status).toBe(404);
    expect(other.body.error.code).toBe('not_found');
    expect((await attempts('999999', 'acme')).status).toBe(404);
    const bad = await attempts('12abc');
    expect(bad.status).toBe(400);
    expect(bad.body.error.details[0].path).toBe('id');
  });

  it('a stale or duplicate message is skipped_stale; one for a task cancelled after its early claim is cancelled', async () => {
    const [a] = await h.enqueue({ task: 'story' }, { now: T0 });
    await h.sweep({ now: T0 });
    const [m] = h.outbox.take();
    await h.consume([m!.body], { now: T0 }); // attempt 1 fails
    await h.consume([m!.body], { now: at(0.5) }); // the same message again
    expect((await attempts(a!.task!.id)).body.attempts.map((x: { outcome: string; epoch: number }) => [x.outcome, x.epoch])).toEqual([
      ['failed', 1],
      ['skipped_stale', 1],
    ]);

    // Claimed early (due in 30 s, within the look-ahead) and sent with a delay, then cancelled.
    const [b] = await h.enqueue({ task: 'returns', payload: {}, delay: 30 }, { now: at(1) });
    await h.sweep({ now: at(1) });
    const early = h.outbox.take().find((x) => (x.body as { id: string }).id === b!.task!.id);
    expect((await api.admin('DELETE', `/v1/tasks/${b!.task!.id}`, { tenant: 'acme' })).status).toBe(200);
    await h.consume([early!.body], { now: at(30) });
    const list = (await attempts(b!.task!.id)).body.attempts;
    expect(list).toEqual([
      expect.objectContaining({ outcome: 'cancelled', epoch: 1, startedAt: null, durationMs: null, error: expect.objectContaining({ name: 'StaleMessage' }) }),
    ]);
  });

  it('a claim the sweep never sent, given back by the reaper, is no attempt; one sent and never reported is', async () => {
    const [r] = await h.enqueue({ task: 'story' }, { now: T0 });
    await expect(h.sweep({ now: T0, faults: crashAt('sweep.after_claim') })).rejects.toThrow(Crash);
    await h.sweep({ now: at(400) }); // reaped: back to queued, no attempt spent; claimed again and sent
    expect((await attempts(r!.task!.id)).body.attempts).toEqual([]);
    h.outbox.take(); // the message is lost
    await h.sweep({ now: at(2000) });
    expect((await attempts(r!.task!.id)).body.attempts).toEqual([
      expect.objectContaining({ attempt: 1, outcome: 'lease_expired', startedAt: null, durationMs: null }),
    ]);
  });

  it('a start refused because the queue was paused is no attempt (the claim is given back)', async () => {
    const [r] = await h.enqueue({ task: 'story', queue: 'held' }, { now: T0 });
    await h.sweep({ now: T0 });
    const [m] = h.outbox.take();
    expect((await api.admin('PUT', '/v1/admin/queues/held', { body: { paused: true } })).status).toBe(200);
    await h.consume([m!.body], { now: T0 });
    expect(await getTask(t.db, 'acme', r!.task!.id)).toMatchObject({ status: 'queued', attempts: 0 });
    expect((await attempts(r!.task!.id)).body.attempts).toEqual([]);
  });

  it('a finish that lost its fence writes no attempt', async () => {
    const [r] = await h.enqueue({ task: 'story' }, { now: T0 });
    await round(T0); // epoch 1 failed; the task waits for its retry
    const stale = await finishIfRunning(t.db, { now: at(1), results: [{ id: r!.task!.id, epoch: 1, outcome: 'succeeded', error: null, retryDelayMs: null, result: '{"x":1}' }] });
    expect(stale.finished).toEqual([]);
    // A failure (which would write a row, unlike a plain success) that lost its fence.
    const staleFailure = await finishIfRunning(t.db, { now: at(1), results: [{ id: r!.task!.id, epoch: 1, outcome: 'failed', error: 'late', retryDelayMs: null }] });
    expect(staleFailure.finished).toEqual([]);
    expect((await attempts(r!.task!.id)).body.attempts).toHaveLength(1);
    expect((await getTask(t.db, 'acme', r!.task!.id))!.result).toBeNull();
  });

  // Issue 12: the drain's common case writes no history row. A success with
  // no http status is the task's own final attempt, shown from the task row.
  it('a success writes no attempt row; its attempt is shown from the task, once, after those that failed', async () => {
    const rows = async (id: string) =>
      (await t.db.query<{ outcome: string }>(`select outcome from task_attempts where task_id = $1::bigint order by finished_at`, [id])).map((x) => x.outcome);
    const [plain] = await h.enqueue({ task: 'returns', payload: { value: 1 } }, { now: T0 });
    await round(T0);
    expect(await rows(plain!.task!.id)).toEqual([]);
    expect((await attempts(plain!.task!.id)).body.attempts).toEqual([
      { attempt: 1, epoch: 1, outcome: 'succeeded', startedAt: T0.toISOString(), finishedAt: T0.toISOString(), durationMs: 0, error: null },
    ]);

    // After a failure: the failed attempt is a row, the success is not.
    const [story] = await h.enqueue({ task: 'story', timeout: 0.05, backoff: { base: 1, max: 1 } }, { now: T0 });
    await round(T0); // 1: fails
    await round(at(2)); // 2: times out
    expect(await rows(story!.task!.id)).toEqual(['failed', 'timed_out']);
    await round(at(4)); // 3: succeeds
    expect(await rows(story!.task!.id)).toEqual(['failed', 'timed_out']);
    expect((await attempts(story!.task!.id)).body.attempts.map((a: { attempt: number; outcome: string }) => [a.attempt, a.outcome])).toEqual([
      [1, 'failed'],
      [2, 'timed_out'],
      [3, 'succeeded'],
    ]);

    // A success row written before this change is shown, never twice.
    await t.db.query(
      `insert into task_attempts (task_id, attempt, epoch, outcome, started_at, finished_at)
       select id, attempts, lease_epoch, 'succeeded', started_at, finished_at from tasks where id = $1::bigint`,
      [plain!.task!.id],
    );
    expect((await attempts(plain!.task!.id)).body.attempts).toHaveLength(1);
  });

  it('a success with an http status keeps its row, so the history shows the status', async () => {
    const [r] = await h.enqueue({ task: 'returns', payload: { value: 1 } }, { now: T0 });
    await h.sweep({ now: T0 });
    const [m] = h.outbox.take();
    const { epoch } = m!.body as { epoch: number };
    // What the consumer reports for an http task: the response's status.
    await startIfClaimed(t.db, { now: T0, tasks: [{ id: r!.task!.id, epoch }], leaseGraceSeconds: 30 });
    await finishIfRunning(t.db, { now: at(1), results: [{ id: r!.task!.id, epoch, outcome: 'succeeded', error: null, retryDelayMs: null, httpStatus: 204 }] });
    expect((await listAttempts(t.db, 'acme', r!.task!.id))!.attempts).toEqual([
      { attempt: 1, epoch, outcome: 'succeeded', startedAt: T0, finishedAt: at(1), error: null, httpStatus: 204 },
    ]);
  });

  it('error name and message are cut to 2 KiB together, NUL replaced', async () => {
    const [r] = await h.enqueue({ task: 'long-error', maxAttempts: 1 }, { now: T0 });
    await round(T0);
    const [a] = (await attempts(r!.task!.id)).body.attempts;
    expect(a.outcome).toBe('failed');
    expect(a.error.name).toBe('Error');
    expect(new TextEncoder().encode(a.error.name + a.error.message).length).toBeLessThanOrEqual(2048);
    expect(a.error.message.endsWith('…')).toBe(true);
    expect(a.error.message).not.toContain('\u0000');
  });

  it('retention deletes the attempts with their task, and only theirs', async () => {
    const [old] = await h.enqueue({ task: 'story', maxAttempts: 1 }, { now: T0 });
    await round(T0);
    const [kept] = await h.enqueue({ task: 'story', maxAttempts: 1 }, { now: at(3600) });
    await round(at(3600));
    const n = async () => (await t.db.query<{ task_id: string }>(`select task_id from task_attempts order by task_id`)).map((x) => String(x.task_id));
    expect(await n()).toEqual([old!.task!.id, kept!.task!.id]);
    expect((await purgeFinishedTasks(t.db, { now: at(1800), retentionSeconds: 600, limit: 100, markRetentionSeconds: 600 })).purged).toBe(1);
    expect(await n()).toEqual([kept!.task!.id]);
  });
});

describe('results', () => {
  const run = async (payload: unknown) => {
    const [r] = await h.enqueue({ task: 'returns', payload, maxAttempts: 1 }, { now: T0 });
    await round(T0);
    const task = (await api.admin('GET', `/v1/tasks/${r!.task!.id}`, { tenant: 'acme' })).body;
    const list = (await attempts(r!.task!.id)).body.attempts;
    return { task, attempt: list[0] };
  };

  it('stores any JSON the handler returns; nothing returned is null', async () => {
    for (const value of [{ a: [1, 'two', null, { d: true }] }, 'text', 42, false, null]) {
      const { task } = await run({ value });
      expect(task).toMatchObject({ status: 'succeeded', result: value });
    }
    expect((await run({})).task).toMatchObject({ status: 'succeeded', result: null });
    // What jsonb cannot hold fails the attempt with a clear error, never the batch.
    const nul = await run({ nul: true });
    expect(nul.task).toMatchObject({ status: 'dead', result: null });
    expect(nul.attempt.error).toEqual({ name: 'ResultError', message: expect.stringMatching(/cannot be stored.*NUL/) });
  });

  it('a result over 64 KiB, or not JSON, fails the attempt with a clear error', async () => {
    const fits = await run({ big: MAX_RESULT_BYTES - 20 });
    expect(fits.task.status).toBe('succeeded');
    const big = await run({ big: MAX_RESULT_BYTES });
    expect(big.task).toMatchObject({ status: 'dead', result: null, lastError: expect.stringMatching(/65547 bytes of JSON; the limit is 65536/) });
    expect(big.attempt).toMatchObject({ outcome: 'failed', error: { name: 'ResultError' } });
    const cyclic = await run({ cyclic: true });
    expect(cyclic.task).toMatchObject({ status: 'dead', lastError: expect.stringMatching(/not JSON/) });
  });
});
