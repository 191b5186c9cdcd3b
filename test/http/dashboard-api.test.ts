// The routes the dashboard added: the admin's tenant and key listings, and
// the per-minute series behind the charts; the queue table it polls.
import { beforeEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { startIfClaimed } from '../../src/db/sql/tasks-fence.ts';
import { PermanentError } from '../../src/handlers/errors.ts';
import { defineTask } from '../../src/handlers/registry.ts';
import { cancelTask } from '../../src/tasks/cancel.ts';
import { at, resetTables, T0, useTestDatabase } from '../helpers/db.ts';
import { createHarness, type Harness } from '../helpers/harness.ts';
import { createTestApi } from '../helpers/http.ts';

const t = useTestDatabase();
const handlers = [
  defineTask('fatal', z.object({}).default({}), async () => {
    throw new PermanentError('no');
  }),
];
let h: Harness;
let api: ReturnType<typeof createTestApi>;

beforeEach(async () => {
  await resetTables(t.db);
  h = createHarness(t.db, { handlers });
  api = createTestApi(t.db, { handlers });
});

describe('GET /v1/admin/tenants and /v1/admin/keys', () => {
  it('lists tenants with a key or a weight, and keys without their secret; a tenant key is refused', async () => {
    const k1 = (await api.admin('POST', '/v1/admin/keys', { body: { tenant: 'acme' } })).body;
    await api.admin('POST', '/v1/admin/keys', { body: { tenant: 'bolt' } });
    await api.admin('PUT', '/v1/admin/tenants/zeta', { body: { queue: 'default', weight: 2 } });
    await api.admin('DELETE', `/v1/admin/keys/${k1.id}`);

    expect((await api.admin('GET', '/v1/admin/tenants')).body).toEqual({ tenants: ['acme', 'bolt', 'zeta'] });
    const keys = (await api.admin('GET', '/v1/admin/keys')).body.keys;
    expect(keys.map((k: { tenant: string }) => k.tenant)).toEqual(['bolt', 'acme']);
    expect(keys[1].revokedAt).not.toBeNull();
    for (const k of keys) expect(Object.keys(k).sort()).toEqual(['createdAt', 'id', 'prefix', 'revokedAt', 'tenant']);
    expect((await api.admin('GET', '/v1/admin/keys?tenant=acme')).body.keys).toHaveLength(1);

    const bad = await api.admin('GET', '/v1/admin/keys?tenant=%00x');
    expect(bad.status).toBe(400);
    expect(bad.body.error.details[0].path).toBe('tenant');
    expect((await api.call('GET', '/v1/admin/tenants', { token: k1.key })).status).toBe(401);
    const live = (await api.admin('POST', '/v1/admin/keys', { body: { tenant: 'acme' } })).body.key;
    expect((await api.call('GET', '/v1/admin/keys', { token: live })).status).toBe(401);
  });
});

describe('GET /v1/stats/finished', () => {
  it('counts finished tasks per queue and minute by outcome, with due-to-start p50/p99, for the caller only', async () => {
    // acme's old history, outside the hour: never shows.
    await h.enqueue([{ task: 'noop' }], { now: at(-7200), tenant: 'acme' });
    await h.drain({ now: at(-7199) });
    // Minute 0: two succeed 2 s late and one dies (and another tenant's one, never shown);
    // minute 1: one succeeds 10 s late.
    await h.enqueue([{ task: 'noop' }, { task: 'noop' }, { task: 'fatal' }], { now: T0, tenant: 'acme' });
    await h.enqueue([{ task: 'noop' }], { now: T0, tenant: 'bolt' });
    await h.drain({ now: at(2) });
    await h.enqueue([{ task: 'noop', queue: 'mail' }], { now: at(60), tenant: 'acme' });
    await h.drain({ now: at(70) });
    const [bolt] = await t.db.query<{ finished_at: Date }>(`select finished_at from tasks where tenant = 'bolt'`);
    expect(bolt!.finished_at).toEqual(at(2));

    api.setNow(at(120));
    const res = await api.admin('GET', '/v1/stats/finished?minutes=60', { tenant: 'acme' });
    expect(res.status).toBe(200);
    expect(res.body.minutes).toEqual([
      { queue: 'default', minute: T0.toISOString(), finished: { succeeded: 2, dead: 1 }, dueToStartP50: 2, dueToStartP99: 2 },
      { queue: 'mail', minute: at(60).toISOString(), finished: { succeeded: 1 }, dueToStartP50: 10, dueToStartP99: 10 },
    ]);

    const bad = await api.admin('GET', '/v1/stats/finished?minutes=100000', { tenant: 'acme' });
    expect(bad.status).toBe(400);
    expect(bad.body.error.details[0].path).toBe('minutes');
    api.setNow(undefined);
    expect((await api.call('GET', '/v1/stats/finished')).status).toBe(401);
  });
});

describe('GET /v1/queues', () => {
  it('live counts as shown now, tasks finished in the last hour by outcome, the lag; nothing older, later or of another tenant', async () => {
    // acme's history two hours back, in 'default' and in 'old': never counted, 'old' not listed.
    await h.enqueue([{ task: 'noop' }, { task: 'noop', queue: 'old' }], { now: at(-7200), tenant: 'acme' });
    await h.drain({ now: at(-7199) });
    // In the hour: two succeeded, one dead, one cancelled; bolt's success beside them.
    await h.enqueue([{ task: 'noop' }, { task: 'noop' }, { task: 'fatal' }], { now: T0, tenant: 'acme' });
    await h.enqueue([{ task: 'noop' }], { now: T0, tenant: 'bolt' });
    await h.drain({ now: at(2) });
    const [doomed] = await h.enqueue({ task: 'noop', delay: 600 }, { now: T0, tenant: 'acme' });
    expect(await cancelTask(t.db, 'acme', { id: doomed!.task!.id }, at(3))).toMatchObject({ status: 'cancelled' });
    // Finished at 12:03:20, after the 12:01:40 the listing is read at (a clock set back): not counted.
    await h.enqueue({ task: 'noop' }, { now: at(150), tenant: 'acme' });
    await h.drain({ now: at(200) });
    await h.enqueue({ task: 'noop', queue: 'bolt-q', delay: 3600 }, { now: at(150), tenant: 'bolt' });

    // Live: 'mail' paused with a task due since 12:00:10; in 'default' one scheduled, one claimed
    // early (shown queued) and one started.
    expect((await api.admin('PUT', '/v1/admin/queues/mail', { body: { paused: true } })).status).toBe(200);
    await h.enqueue({ task: 'noop', queue: 'mail', runAt: at(10) }, { now: at(10), tenant: 'acme' });
    await h.enqueue([{ task: 'noop', delay: 3600 }, { task: 'noop' }, { task: 'noop', delay: 30 }], { now: at(90), tenant: 'acme' });
    await h.sweep({ now: at(90) });
    const sent = h.outbox.take();
    expect(sent).toHaveLength(2);
    const start = await startIfClaimed(t.db, { now: at(90), tasks: sent.map((m) => m.body), leaseGraceSeconds: 30 });
    expect([start.started.length, start.early.length]).toEqual([1, 1]);

    api.setNow(at(100));
    const res = await api.admin('GET', '/v1/queues', { tenant: 'acme' });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({
      queues: [
        {
          name: 'default',
          paused: false,
          counts: { scheduled: 1, queued: 1, running: 1, succeeded: 2, dead: 1, cancelled: 1, missed: 0 },
          lagSeconds: 0,
        },
        {
          name: 'mail',
          paused: true,
          counts: { scheduled: 0, queued: 1, running: 0, succeeded: 0, dead: 0, cancelled: 0, missed: 0 },
          lagSeconds: 90,
        },
      ],
    });
    // bolt sees only its own.
    const bolt = await api.admin('GET', '/v1/queues', { tenant: 'bolt' });
    expect(bolt.body.queues.map((q: { name: string; counts: { succeeded: number; scheduled: number } }) => [q.name, q.counts.succeeded, q.counts.scheduled])).toEqual([
      ['bolt-q', 0, 1],
      ['default', 1, 0],
    ]);
  });
});
