// Completion callbacks (issue 15) at the database: the row trigger of
// migration 0017 creates the callback task inside whichever statement
// finishes the task (finish, reaper, cancel, bulk cancel, a missed
// occurrence), only for the statuses in `on`, once; tasks without a callback
// get none. Delivery, signature and retries: test/worker/callbacks.test.ts.
import { beforeEach, describe, expect, it } from 'vitest';
import { T0, at, resetTables, useTestDatabase } from '../helpers/db.ts';
import { crashAt, Crash } from '../helpers/faults.ts';
import { createHarness, type Harness } from '../helpers/harness.ts';
import { createTestApi } from '../helpers/http.ts';
import { expectPendingCounted } from '../helpers/invariants.ts';

const t = useTestDatabase();
let h: Harness;
let api: ReturnType<typeof createTestApi>;
const URL_ = 'https://hooks.example.com/done';

beforeEach(async () => {
  await resetTables(t.db);
  h = createHarness(t.db);
  api = createTestApi(t.db);
  api.setNow(T0);
});

/** Callback tasks by the task they report on. */
async function callbacks(): Promise<Map<string, { status: string; payload: { url: string; method: string; body: Record<string, unknown> }; run_at: Date }>> {
  const rows = await t.db.query<{ callback_of: string; status: string; payload: any; run_at: Date; task: string }>(
    `select callback_of, status, payload, run_at, task from tasks where callback_of is not null`,
  );
  for (const r of rows) expect(r.task).toBe('http');
  return new Map(rows.map((r) => [String(r.callback_of), r]));
}
/** Through the core (no kick from the API: the test sweeps itself). */
const enqueue = async (input: Record<string, unknown>) => (await h.enqueue({ task: 'noop', ...input }, { now: T0 }))[0]!.task!.id;

describe('completion callbacks', () => {
  it('every path to a terminal state creates the callback in its own statement: finish, reaper, cancel, bulk cancel, missed', async () => {
    const succeeded = await enqueue({ callback: { url: URL_ } });
    // With a rate limit: the body shows it as GET does.
    const cancelled = await enqueue({ delay: 3600, rateLimit: { key: 'partner', limit: 5, periodSeconds: 1 }, callback: { url: URL_ } });
    const bulk = await enqueue({ delay: 3600, queue: 'bulk', callback: { url: URL_ } });
    const lost = await enqueue({ maxAttempts: 1, callback: { url: URL_ } });
    const plain = await enqueue({});

    await h.sweep({ now: T0 });
    const sent = h.outbox.take();
    const mine = (id: string) => sent.filter((m) => (m.body as { id: string }).id === id).map((m) => m.body);
    await h.consume([...mine(succeeded), ...mine(plain)], { now: T0 });
    await expect(h.consume(mine(lost), { now: T0, faults: crashAt('consume.after_start') })).rejects.toThrow(Crash);
    expect((await api.admin('DELETE', `/v1/tasks/${cancelled}`, { tenant: 'acme' })).status).toBe(200);
    expect((await api.admin('POST', '/v1/tasks/bulk-cancel', { tenant: 'acme', body: { queue: 'bulk' } })).body.affected).toBe(1);
    await h.sweep({ now: at(600) }); // the reaper: lost's only attempt expired, dead

    // A schedule's occurrences carry its callback; a missed one calls back too.
    const put = await api.admin('PUT', '/v1/schedules/solo', {
      tenant: 'acme',
      body: { task: 'noop', interval: 60, overlap: 'skip', callback: { url: URL_, on: ['missed'] } },
    });
    expect(put.status).toBe(201);
    expect(put.body.callback).toEqual({ url: URL_, on: ['missed'] });
    await h.sweep({ now: at(660) }); // fires, claimed, never finishes
    h.outbox.take();
    await h.sweep({ now: at(720) }); // the next time is missed
    const missedIds = (await t.db.query<{ id: string }>(`select id from tasks where status = 'missed'`)).map((r) => String(r.id));
    expect(missedIds.length).toBeGreaterThan(0);
    const missed = missedIds[0]!;

    const cb = await callbacks();
    const status = async (id: string) => (await api.admin('GET', `/v1/tasks/${id}`, { tenant: 'acme' })).body;
    for (const [id, expected] of [
      [succeeded, 'succeeded'],
      [cancelled, 'cancelled'],
      [bulk, 'cancelled'],
      [lost, 'dead'],
      [String(missed), 'missed'],
    ] as const) {
      const c = cb.get(id);
      expect(c, expected).toBeDefined();
      expect(c!.payload).toMatchObject({ url: URL_, method: 'POST' });
      // The body is the task exactly as GET /v1/tasks/{id} shows it.
      expect(c!.payload.body).toEqual(await status(id));
      expect(c!.payload.body.status).toBe(expected);
      // Due when the task finished (the sweep hands it on like any due task).
      expect(c!.run_at.toISOString()).toBe(c!.payload.body.finishedAt);
    }
    expect(cb.get(lost)!.payload.body.lastError).toMatch(/lease expired/);
    // No callback for tasks without one; the occurrence that ran has `on: [missed]` only.
    expect(cb.size).toBe(4 + missedIds.length);
    for (const id of missedIds) expect(cb.get(id)!.payload.body.status).toBe('missed');
    expect(cb.has(plain)).toBe(false);

    // The callbacks run as http tasks (here their target is refused at run time: no network in this test).
    const callbackTask = (await api.admin('GET', `/v1/tasks?task=http`, { tenant: 'acme' })).body.tasks.find(
      (x: { callbackOf: string }) => x.callbackOf === succeeded,
    );
    expect(callbackTask).toMatchObject({ queue: 'default', callback: null, maxAttempts: 10 });
    // The callback tasks are pending like any task (what maxPendingTasks reads), and leave it when they finish.
    await expectPendingCounted(t.db);
    await h.drain({ now: at(900) });
    await expectPendingCounted(t.db);
  });

  it('only the statuses in `on`', async () => {
    const id = await enqueue({ callback: { url: URL_, on: ['dead', 'cancelled'] } });
    await h.drain({ now: T0 });
    expect((await api.admin('GET', `/v1/tasks/${id}`, { tenant: 'acme' })).body.status).toBe('succeeded');
    expect((await callbacks()).size).toBe(0);
  });

  it('refuses a private, internal or metadata callback URL with a 400 naming callback.url (SSRF), at enqueue and schedule writes', async () => {
    for (const url of ['http://169.254.169.254/latest/meta-data', 'http://localhost:8080/x', 'http://10.0.0.1/', 'ftp://example.com/']) {
      const r = await api.admin('POST', '/v1/tasks', { tenant: 'acme', body: { task: 'noop', callback: { url } } });
      expect(r.status, url).toBe(400);
      expect(r.body.error.details).toEqual([{ path: 'callback.url', message: expect.any(String) }]);
    }
    const batch = await api.admin('POST', '/v1/tasks/batch', {
      tenant: 'acme',
      body: { tasks: [{ task: 'noop' }, { task: 'noop', callback: { url: 'http://127.0.0.1/' } }] },
    });
    expect(batch.body.error.details[0].path).toBe('tasks.1.callback.url');
    const s = await api.admin('PUT', '/v1/schedules/x', { tenant: 'acme', body: { task: 'noop', interval: 60, callback: { url: 'http://127.0.0.1/' } } });
    expect(s.status).toBe(400);
    expect(s.body.error.details[0].path).toBe('callback.url');
    expect(await t.db.query(`select 1 from tasks`)).toEqual([]);
  });
});
