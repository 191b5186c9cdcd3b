// Replay, bulk actions and "run a schedule now" through the Worker (issue 15):
// every route's success and errors, 25,000 tasks in three bulk calls, and
// tenant isolation, with the real driver and the real local Queue.
import { env, exports } from 'cloudflare:workers';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ApiError } from '../../packages/client/src/index.ts';
import { createNeonDb } from '../../src/db/neon.ts';
import type { Db } from '../../src/db/seam.ts';
import { api, BASE, waitForStatus, workerClient } from '../helpers/workerd.ts';

let db: Db;
// The admin token acts as the tenant X-Tenant names (creating keys would log at info level).
const ACME = 'replay-acme';
const OTHER = 'replay-other';

const call = (method: string, path: string, init: Parameters<typeof api>[2] = {}) => api(method, path, { tenant: ACME, ...init });
const paths = (r: { body: any }) => (r.body.error?.details ?? []).map((d: { path: string }) => d.path);

/** `n` tasks of one tenant in one state, in one statement; their ids, ascending. */
async function seed(tenant: string, status: string, n: number, queue = 'default', started = false): Promise<string[]> {
  const rows = await db.query<{ id: string }>(
    `insert into tasks (tenant, queue, task, payload, status, run_at, finished_at, vtime, claimed_by,
                        lease_epoch, lease_expires_at, started_at, attempts, last_error)
     select $1::text, $3::text, 'noop', jsonb_build_object('i', g), $2::text,
            case when $2::text = 'scheduled' then now() + interval '1 day' else now() end,
            case when $2::text in ('succeeded', 'dead', 'cancelled', 'missed') then now() end,
            case when $2::text = 'queued' then 1e9 + g end,
            case when $2::text = 'running' then 'seed' end,
            case when $2::text = 'running' then 1 else 0 end,
            case when $2::text = 'running' then now() + interval '1 hour' end,
            case when $5::boolean then now() end,
            case when $2::text in ('running', 'succeeded', 'dead') then 1 else 0 end,
            case when $2::text = 'dead' then 'receiver down' end
     from generate_series(1, $4::int) g
     returning id`,
    [tenant, status, queue, n, started],
  );
  return rows.map((r) => String(r.id)).sort((a, b) => Number(a) - Number(b));
}
const rowOf = async (id: string) => (await db.query<Record<string, unknown>>(`select * from tasks where id = $1::bigint`, [id]))[0]!;

beforeAll(async () => {
  db = createNeonDb({ connectionString: env.DATABASE_URL, wsProxy: env.DATABASE_WS_PROXY });
});
afterAll(async () => {
  await db.close();
});

describe('POST /v1/tasks/{id}/replay', () => {
  it('replays each terminal status as a new task; the original never changes', async () => {
    for (const status of ['succeeded', 'dead', 'cancelled', 'missed']) {
      const [id] = await seed('replay-acme', status, 1, 'replay-q');
      const before = await rowOf(id!);
      const r = await call('POST', `/v1/tasks/${id}/replay`);
      expect(r.status, status).toBe(201);
      expect(r.body).toMatchObject({ task: 'noop', queue: 'replay-q', payload: { i: 1 }, replayOf: id, idempotencyKey: null, attempts: 0 });
      expect(r.body.status).toMatch(/queued|running|succeeded/);
      expect(await rowOf(id!)).toEqual(before);
      // Replayed once: the same replay comes back.
      const again = await call('POST', `/v1/tasks/${id}/replay`, { body: {} });
      expect(again.status).toBe(200);
      expect(again.body.id).toBe(r.body.id);
    }
  });

  it('a replay due now runs to succeeded; runAt and delay set when it is due', async () => {
    const [a, b, c] = await seed('replay-acme', 'dead', 3);
    const now = await call('POST', `/v1/tasks/${a}/replay`);
    const got = await waitForStatus(now.body.id, ACME, 'succeeded');
    expect(got).toMatchObject({ status: 'succeeded', replayOf: a });
    const later = await call('POST', `/v1/tasks/${b}/replay`, { body: { runAt: '2100-01-01T00:00:00Z' } });
    expect(later.body).toMatchObject({ status: 'scheduled', runAt: '2100-01-01T00:00:00.000Z' });
    const delayed = await call('POST', `/v1/tasks/${c}/replay`, { body: { delay: 7200 } });
    expect(delayed.body.status).toBe('scheduled');
    expect(Date.parse(delayed.body.runAt) - Date.parse(delayed.body.createdAt)).toBe(7_200_000);
  });

  it('answers 409 for a task that has not finished, 404 for an unknown or foreign one, 400 for bad input; writes nothing', async () => {
    const waiting = [
      ...(await seed('replay-acme', 'scheduled', 1)),
      ...(await seed('replay-acme', 'queued', 1, 'replay-paused')),
      ...(await seed('replay-acme', 'running', 1)),
      ...(await seed('replay-acme', 'running', 1, 'default', true)),
    ];
    for (const id of waiting) {
      const r = await call('POST', `/v1/tasks/${id}/replay`);
      expect(r.status).toBe(409);
      expect(r.body.error.code).toBe('conflict');
    }
    const [foreign] = await seed('replay-acme', 'dead', 1);
    const stolen = await call('POST', `/v1/tasks/${foreign}/replay`, { tenant: OTHER });
    expect(stolen.status).toBe(404);
    expect((await call('POST', '/v1/tasks/987654321987/replay')).status).toBe(404);

    const bad: [string, { body?: unknown; raw?: string }, string][] = [
      ['/v1/tasks/9223372036854775808/replay', {}, 'id'],
      ['/v1/tasks/abc/replay', {}, 'id'],
      [`/v1/tasks/${foreign}/replay`, { body: { runAt: 'tomorrow' } }, 'runAt'],
      [`/v1/tasks/${foreign}/replay`, { body: { runAt: '2100-01-01T00:00:00Z', delay: 5 } }, 'delay'],
      [`/v1/tasks/${foreign}/replay`, { body: { delay: -1 } }, 'delay'],
      [`/v1/tasks/${foreign}/replay`, { body: { payload: {} } }, 'payload'],
      [`/v1/tasks/${foreign}/replay`, { raw: '{"runAt": "2100-01-01T00:00:00Z\\u0000"}' }, 'runAt'],
      [`/v1/tasks/${foreign}/replay`, { raw: '{not json' }, 'body'],
    ];
    for (const [path, init, field] of bad) {
      const r = await call('POST', path, init);
      expect(r.status, `${path} ${JSON.stringify(init)}`).toBe(400);
      expect(paths(r), `${path} ${JSON.stringify(init)}`).toContain(field);
    }
    const n = await db.query<{ n: number }>(
      `select count(*)::int as n from tasks where replay_of = any($1::bigint[])`,
      [[...waiting, foreign]],
    );
    expect(n[0]!.n).toBe(0);
  });
});

describe('bulk actions', () => {
  it('bulk-replay: 25,000 dead tasks in three calls of 10,000, nothing twice', async () => {
    // A paused queue: the replays wait, so this test measures the replays, not their runs.
    expect((await call('PUT', '/v1/admin/queues/replay-bulk', { body: { paused: true } })).status).toBe(200);
    const seeded = await seed('replay-acme', 'dead', 25_000, 'replay-bulk');
    const calls = [];
    for (let i = 0; i < 4; i++) {
      const r = await call('POST', '/v1/tasks/bulk-replay', { body: { queue: 'replay-bulk', status: ['dead'], limit: 10_000 } });
      expect(r.status).toBe(200);
      expect(r.body.affected).toBe(r.body.ids.length);
      expect(r.body.replayIds).toHaveLength(r.body.ids.length);
      calls.push(r.body);
    }
    expect(calls.map((c) => c.affected)).toEqual([10_000, 10_000, 5_000, 0]);
    expect(calls.flatMap((c) => c.ids)).toEqual(seeded);
    const stored = await db.query<{ n: number; originals: number; queued: number }>(
      `select count(*)::int as n, count(distinct replay_of)::int as originals,
              count(*) filter (where status = 'queued' and vtime is not null)::int as queued
       from tasks where tenant = 'replay-acme' and queue = 'replay-bulk' and replay_of is not null`,
    );
    expect(stored[0]).toEqual({ n: 25_000, originals: 25_000, queued: 25_000 });
    const unchanged = await db.query<{ n: number }>(
      `select count(*)::int as n from tasks where id = any($1::bigint[]) and status = 'dead' and attempts = 1`,
      [seeded],
    );
    expect(unchanged[0]!.n).toBe(25_000);
  });

  it('bulk-cancel: 25,000 waiting tasks in three calls of 10,000, nothing twice', async () => {
    const seeded = await seed('replay-acme', 'scheduled', 25_000, 'replay-cancel');
    const calls = [];
    for (let i = 0; i < 4; i++) {
      const r = await call('POST', '/v1/tasks/bulk-cancel', { body: { queue: 'replay-cancel', limit: 10_000 } });
      expect(r.status).toBe(200);
      calls.push(r.body);
    }
    expect(calls.map((c) => c.affected)).toEqual([10_000, 10_000, 5_000, 0]);
    expect(calls.flatMap((c) => c.ids)).toEqual(seeded);
    const stored = await db.query<{ status: string; n: number }>(
      `select status, count(*)::int as n from tasks where queue = 'replay-cancel' group by status`,
    );
    expect(stored).toEqual([{ status: 'cancelled', n: 25_000 }]);
  });

  it('bulk-cancel takes claimed-early tasks, not started ones; the default limit is 1,000', async () => {
    const early = await seed('replay-acme', 'running', 2, 'replay-mixed');
    const started = await seed('replay-acme', 'running', 1, 'replay-mixed', true);
    const waiting = await seed('replay-acme', 'queued', 1_200, 'replay-mixed');
    const r = await call('POST', '/v1/tasks/bulk-cancel', { body: { queue: 'replay-mixed' } });
    expect(r.body.affected).toBe(1_000);
    expect(r.body.ids.slice(0, 2)).toEqual(early);
    const rest = await call('POST', '/v1/tasks/bulk-cancel', { body: { queue: 'replay-mixed' } });
    expect(rest.body.ids).toEqual(waiting.slice(998));
    expect((await rowOf(started[0]!)).status).toBe('running');
  });

  it("another tenant's ids: nothing is cancelled or replayed", async () => {
    const waiting = await seed('replay-acme', 'scheduled', 3);
    const dead = await seed('replay-acme', 'dead', 3);
    const c = await call('POST', '/v1/tasks/bulk-cancel', { tenant: OTHER, body: { ids: waiting } });
    expect(c.body).toEqual({ affected: 0, ids: [] });
    const r = await call('POST', '/v1/tasks/bulk-replay', { tenant: OTHER, body: { ids: dead } });
    expect(r.body).toEqual({ affected: 0, ids: [], replayIds: [] });
    const rows = await db.query<{ n: number }>(
      `select count(*)::int as n from tasks
       where (id = any($1::bigint[]) and status = 'scheduled') or (id = any($2::bigint[]) and status = 'dead')`,
      [waiting, dead],
    );
    expect(rows[0]!.n).toBe(6);
    expect((await db.query(`select 1 from tasks where replay_of = any($1::bigint[])`, [dead])).length).toBe(0);
  });

  it('refuses bad filters with 400 naming the field, and changes nothing', async () => {
    const [waiting] = await seed('replay-acme', 'scheduled', 1);
    const cases: [string, unknown, string][] = [
      ['cancel', {}, 'body'],
      ['cancel', { limit: 5 }, 'body'],
      ['replay', {}, 'body'],
      ['cancel', { ids: [] }, 'ids'],
      ['cancel', { ids: ['9223372036854775808'] }, 'ids.0'],
      ['cancel', { ids: ['-1'] }, 'ids.0'],
      ['cancel', { ids: [42] }, 'ids.0'],
      ['cancel', { ids: Array.from({ length: 10_001 }, (_, i) => String(i + 1)) }, 'ids'],
      ['cancel', { queue: 'bad\u0000queue' }, 'queue'],
      ['cancel', { task: '\ud800' }, 'task'],
      ['cancel', { status: ['succeeded'] }, 'status.0'],
      ['cancel', { status: ['queued', 'running'] }, 'status.1'],
      ['replay', { status: ['queued'] }, 'status.0'],
      ['replay', { status: ['sleeping'] }, 'status.0'],
      ['replay', { status: [] }, 'status'],
      ['cancel', { queue: 'default', limit: 0 }, 'limit'],
      ['cancel', { queue: 'default', limit: 10_001 }, 'limit'],
      ['replay', { queue: 'default', limit: 1.5 }, 'limit'],
      ['replay', { createdAfter: 'yesterday\u0000' }, 'createdAfter'],
      ['replay', { createdBefore: 12 }, 'createdBefore'],
      ['replay', { queue: 'default', surprise: true }, 'surprise'],
    ];
    for (const [action, body, field] of cases) {
      const r = await call('POST', `/v1/tasks/bulk-${action}`, { body });
      expect(r.status, `${action} ${JSON.stringify(body).slice(0, 80)}`).toBe(400);
      expect(r.body.error.code).toBe('invalid_request');
      expect(paths(r), `${action} ${JSON.stringify(body).slice(0, 80)}`).toContain(field);
    }
    const raw = await call('POST', '/v1/tasks/bulk-cancel', { raw: '{"queue": ' });
    expect(raw.status).toBe(400);
    expect((await rowOf(waiting!)).status).toBe('scheduled');
    const noKey = await exports.default.fetch(`${BASE}/v1/tasks/bulk-cancel`, { method: 'POST', body: '{"queue":"default"}' });
    expect(noKey.status).toBe(401);
    const wrongKey = await exports.default.fetch(`${BASE}/v1/schedules/x/trigger`, { method: 'POST', headers: { authorization: 'Bearer edsk_forged' } });
    expect(wrongKey.status).toBe(401);
    expect(noKey.status).toBe(401);
  });
});

describe('POST /v1/schedules/{name}/trigger', () => {
  it('runs a paused schedule now, without moving it', async () => {
    const put = await call('PUT', '/v1/schedules/replay-nightly', { body: { cron: '0 3 * * *', task: 'noop', payload: { n: 7 }, enabled: false } });
    expect(put.status).toBe(201);
    const r = await call('POST', '/v1/schedules/replay-nightly/trigger');
    expect(r.status).toBe(201);
    expect(r.body).toMatchObject({ task: 'noop', payload: { n: 7 }, scheduledFor: r.body.runAt });
    expect(r.body.status).toMatch(/queued|running|succeeded/);
    const after = await call('GET', '/v1/schedules/replay-nightly');
    expect(after.body).toMatchObject({ enabled: false, nextRunAt: put.body.nextRunAt, lastFiredAt: null });
    const second = await call('POST', '/v1/schedules/replay-nightly/trigger');
    expect(second.status).toBe(201);
    expect(second.body.id).not.toBe(r.body.id);
    const runs = await call('GET', '/v1/schedules/replay-nightly/runs');
    expect(runs.body.tasks.map((t: { id: string }) => t.id).sort()).toEqual([r.body.id, second.body.id].sort());
    const got = await waitForStatus(r.body.id, ACME, 'succeeded');
    expect(got.status).toBe('succeeded');
  });

  it("answers 404 for an unknown or another tenant's schedule, 400 for a bad name; writes nothing", async () => {
    await call('PUT', '/v1/schedules/replay-private', { body: { interval: 3600, task: 'noop' } });
    const foreign = await call('POST', '/v1/schedules/replay-private/trigger', { tenant: OTHER });
    expect(foreign.status).toBe(404);
    expect(foreign.body.error.code).toBe('not_found');
    expect((await call('POST', '/v1/schedules/no-such-schedule/trigger')).status).toBe(404);
    const bad = await call('POST', '/v1/schedules/bad%00name/trigger');
    expect(bad.status).toBe(400);
    expect(paths(bad)).toContain('name');
    const runs = await call('GET', '/v1/schedules/replay-private/runs');
    expect(runs.body.tasks).toEqual([]);
  });
});

describe('the client', () => {
  it('replay, bulkCancel, bulkReplay and trigger', async () => {
    const client = workerClient({ tenant: ACME });
    const [dead] = await seed('replay-acme', 'dead', 1, 'replay-client');
    const first = await client.tasks.replay(dead!, { delay: 3600 });
    expect(first).toMatchObject({ created: true, task: { replayOf: dead, status: 'scheduled' } });
    expect(await client.tasks.replay(dead!)).toEqual({ created: false, task: first.task });
    const cancelled = await client.tasks.bulkCancel({ ids: [first.task.id] });
    expect(cancelled).toEqual({ affected: 1, ids: [first.task.id] });
    const replayed = await client.tasks.bulkReplay({ queue: 'replay-client', status: ['cancelled'] });
    expect(replayed.ids).toEqual([first.task.id]);
    expect(replayed.replayIds).toHaveLength(1);
    await expect(client.tasks.bulkReplay({})).rejects.toBeInstanceOf(ApiError);
    await client.schedules.put('replay-client', { interval: 86_400, task: 'noop', enabled: false });
    expect(await client.schedules.trigger('replay-client')).toMatchObject({ task: 'noop', scheduleId: expect.any(String) });
    await expect(client.schedules.trigger('replay-missing')).rejects.toMatchObject({ status: 404, code: 'not_found' });
  });
});
