// The isolation matrix (S16): tenant B, with its own valid key, goes after
// tenant A's work every way the API allows. Every attempt is a 404 or an
// empty answer, and A's data is unchanged afterwards.
import { beforeAll, describe, expect, it } from 'vitest';
import { at, T0, useTestDatabase } from '../helpers/db.ts';
import { createHarness } from '../helpers/harness.ts';
import { createTestApi } from '../helpers/http.ts';

const t = useTestDatabase();
let api: ReturnType<typeof createTestApi>;
let keyA: string;
let keyB: string;

beforeAll(async () => {
  api = createTestApi(t.db);
  keyA = (await api.admin('POST', '/v1/admin/keys', { body: { tenant: 'tenant-a' } })).body.key;
  keyB = (await api.admin('POST', '/v1/admin/keys', { body: { tenant: 'tenant-b' } })).body.key;
});

const snapshot = async () => ({
  tasks: await t.db.query(`select * from tasks where tenant = 'tenant-a' order by id`),
  schedules: await t.db.query(`select * from schedules where tenant = 'tenant-a' order by id`),
});

describe('tenant isolation', () => {
  it("B can neither see nor change A's tasks", async () => {
    const a1 = await api.call('POST', '/v1/tasks', { token: keyA, body: { task: 'noop', delay: 3600, idempotencyKey: 'shared-key', payload: { owner: 'a' } } });
    const a2 = await api.call('POST', '/v1/tasks', { token: keyA, body: { task: 'noop', delay: 7200 } });
    expect(a1.status).toBe(201);
    // And one of A's claimed (running, not started): B's queue view must not count it either.
    await api.call('POST', '/v1/tasks', { token: keyA, body: { task: 'noop' } });
    await createHarness(t.db).sweep();
    expect(await t.db.query(`select 1 from tasks where tenant = 'tenant-a' and status = 'running'`)).toHaveLength(1);
    const before = await snapshot();

    const read = await api.call('GET', `/v1/tasks/${a1.body.id}`, { token: keyB });
    const cancel = await api.call('DELETE', `/v1/tasks/${a2.body.id}`, { token: keyB });
    const cancelByKey = await api.call('DELETE', '/v1/tasks/by-key/shared-key', { token: keyB });
    for (const r of [read, cancel, cancelByKey]) {
      expect(r.status).toBe(404);
      expect(r.body).toEqual({ error: { code: 'not_found', message: 'task not found' } });
    }
    // Reusing A's idempotency key creates B's own task; A's is untouched.
    const reschedule = await api.call('POST', '/v1/tasks', {
      token: keyB,
      body: { task: 'noop', idempotencyKey: 'shared-key', payload: { owner: 'b' } },
    });
    expect(reschedule.status).toBe(201);
    expect(reschedule.body.id).not.toBe(a1.body.id);
    expect(reschedule.body.payload).toEqual({ owner: 'b' });
    // B's queue view shows only B's work.
    const queues = await api.call('GET', '/v1/queues', { token: keyB });
    expect(queues.body.queues).toHaveLength(1);
    const counts = queues.body.queues[0].counts as Record<string, number>;
    expect(Object.values(counts).reduce((a, b) => a + b, 0)).toBe(1); // A's three tasks are not counted
    expect(counts.scheduled).toBe(0);
    // The admin token cannot be used to pass a tenant key's scope: X-Tenant is ignored with a key.
    const spoof = await api.call('GET', `/v1/tasks/${a1.body.id}`, { token: keyB, tenant: 'tenant-a' });
    expect(spoof.status).toBe(404);

    // Listing shows none of A's tasks.
    const list = await api.call('GET', '/v1/tasks?limit=500', { token: keyB });
    expect(list.body.tasks.map((x: { id: string }) => x.id)).toEqual([reschedule.body.id]);

    expect(await snapshot()).toEqual(before);
  });

  it("B can neither see, replace, pause, resume, preview, trigger, list the runs of, nor delete A's schedules", async () => {
    await api.call('PUT', '/v1/schedules/nightly', { token: keyA, body: { task: 'noop', cron: '0 3 * * *', payload: { owner: 'a' } } });
    const before = await snapshot();
    for (const [method, path] of [
      ['GET', '/v1/schedules/nightly'],
      ['POST', '/v1/schedules/nightly/pause'],
      ['POST', '/v1/schedules/nightly/resume'],
      ['GET', '/v1/schedules/nightly/next'],
      ['GET', '/v1/schedules/nightly/runs'],
      ['POST', '/v1/schedules/nightly/trigger'],
      ['DELETE', '/v1/schedules/nightly'],
    ] as const) {
      const r = await api.call(method, path, { token: keyB });
      expect(r.status, `${method} ${path}`).toBe(404);
      expect(r.body.error.code).toBe('not_found');
    }
    const list = await api.call('GET', '/v1/schedules', { token: keyB });
    expect(list.body).toEqual({ schedules: [], nextCursor: null });
    // "Replacing" under the same name creates B's own schedule; A's is untouched.
    const mine = await api.call('PUT', '/v1/schedules/nightly', { token: keyB, body: { task: 'noop', interval: 60, payload: { owner: 'b' } } });
    expect(mine.status).toBe(201);
    expect(await snapshot()).toEqual(before);
    const asA = await api.call('GET', '/v1/schedules/nightly', { token: keyA });
    expect(asA.body).toMatchObject({ kind: 'cron', payload: { owner: 'a' } });
  });

  it("B's schedule under A's name takes its own anchor; replacing and deleting it leave A's occurrences alone", async () => {
    await t.db.query('truncate tasks, schedules, tenant_pending_counts restart identity'); // the earlier tests' schedules would fire too
    api.setNow(T0);
    const a = await api.call('PUT', '/v1/schedules/tick', { token: keyA, body: { task: 'noop', interval: 60 } });
    expect(a.body.nextRunAt).toBe(at(60).toISOString());
    api.setNow(at(25));
    const b = await api.call('PUT', '/v1/schedules/tick', { token: keyB, body: { task: 'noop', interval: 60 } });
    expect(b.status).toBe(201);
    expect(b.body.nextRunAt).toBe(at(85).toISOString()); // its own rhythm, not A's
    // Both fire within the look-ahead: claimed early, not started.
    expect((await createHarness(t.db).sweep({ now: at(30) })).materialized.fired).toBe(2);
    const before = await snapshot();
    // B replaces its schedule (its planned occurrence is taken back), then deletes it.
    expect((await api.call('PUT', '/v1/schedules/tick', { token: keyB, body: { task: 'noop', interval: 120 } })).status).toBe(200);
    expect(await snapshot()).toEqual(before);
    expect((await api.call('DELETE', '/v1/schedules/tick', { token: keyB })).status).toBe(200);
    expect(await snapshot()).toEqual(before);
    const bTasks = await t.db.query<{ status: string }>(`select status from tasks where tenant = 'tenant-b'`);
    expect(bTasks).toEqual([]); // its planned occurrence was withdrawn by the replace
    api.setNow(undefined);
  });

  it("B replacing or pausing its schedule under A's name leaves A's occurrences and schedule alone", async () => {
    await t.db.query('truncate tasks, schedules, tenant_pending_counts restart identity');
    api.setNow(T0);
    expect((await api.call('PUT', '/v1/schedules/tick', { token: keyA, body: { task: 'noop', interval: 60 } })).status).toBe(201);
    api.setNow(at(25));
    expect((await api.call('PUT', '/v1/schedules/tick', { token: keyB, body: { task: 'noop', interval: 60 } })).status).toBe(201);
    // Both fire within the look-ahead: claimed early, not started.
    expect((await createHarness(t.db).sweep({ now: at(30) })).materialized.fired).toBe(2);
    const before = await snapshot();
    api.setNow(at(30));
    expect((await api.call('PUT', '/v1/schedules/tick', { token: keyB, body: { task: 'noop', interval: 90 } })).status).toBe(200);
    expect(await snapshot()).toEqual(before);
    expect((await api.call('POST', '/v1/schedules/tick/pause', { token: keyB })).status).toBe(200);
    expect(await snapshot()).toEqual(before);
    const bTasks = await t.db.query(`select id from tasks where tenant = 'tenant-b'`);
    expect(bTasks).toEqual([]); // B's own occurrence was withdrawn by its replace
    api.setNow(undefined);
  });
});
