// Every route of the API, success and error, driven only through the typed
// client, against the Worker running in workerd.
import { env } from 'cloudflare:workers';
import { beforeAll, describe, expect, it } from 'vitest';
import { ApiError, type Client } from '../../packages/client/src/index.ts';
import { workerClient } from '../helpers/workerd.ts';

const admin = workerClient();
let acme: Client;
let other: Client;

async function fails(promise: Promise<unknown>, status: number, code: string, path?: string): Promise<ApiError> {
  const error = await promise.then(
    () => {
      throw new Error('expected an ApiError');
    },
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(ApiError);
  const e = error as ApiError;
  expect(e.status).toBe(status);
  expect(e.code).toBe(code);
  expect(e.requestId).toBeTruthy();
  if (path) expect(e.details.map((d) => d.path)).toContain(path);
  return e;
}

beforeAll(async () => {
  const a = await admin.admin.createKey('client-acme');
  const b = await admin.admin.createKey('client-other');
  acme = workerClient({ key: a.key });
  other = workerClient({ key: b.key });
});

describe('the client, over every route', () => {
  it('health', async () => {
    expect(await acme.health()).toEqual({ ok: true, transport: env.EXPECTED_TRANSPORT });
  });

  it('tasks: enqueue, deduplicate, batch, get, list, iterate, cancel', async () => {
    const t1 = await acme.tasks.enqueue({ task: 'noop', delay: 3600, idempotencyKey: 'client-k1', payload: { n: 1 } });
    expect(t1).toMatchObject({ status: 'scheduled', idempotencyKey: 'client-k1' });
    const again = await acme.tasks.enqueue({ task: 'noop', delay: 7200, idempotencyKey: 'client-k1', payload: { n: 2 } });
    expect(again).toMatchObject({ id: (t1 as { id: string }).id, payload: { n: 2 } });
    await fails(acme.tasks.enqueue({ task: 'noop', runAt: 'not a date' }), 400, 'invalid_request', 'runAt');

    const batch = await acme.tasks.batch([{ task: 'noop', delay: 3600 }, { task: 'noop', delay: 3600, queue: 'client-q' }]);
    expect(batch).toHaveLength(2);
    await fails(acme.tasks.batch([{ task: 'noop' }, { task: 'noop', delay: -3 }]), 400, 'invalid_request', 'tasks.1.delay');

    const id = (t1 as { id: string }).id;
    expect((await acme.tasks.get(id)).id).toBe(id);
    await fails(other.tasks.get(id), 404, 'not_found');

    const page = await acme.tasks.list({ limit: 2 });
    expect(page.items).toHaveLength(2);
    expect(page.nextCursor).not.toBeNull();
    const all: string[] = [];
    for await (const t of acme.tasks.iterate({ status: ['scheduled'] })) all.push(t.id);
    expect(all.length).toBe(3);
    await fails(acme.tasks.list({ cursor: 'forged' }), 400, 'invalid_request', 'cursor');

    expect((await acme.tasks.cancel(id)).status).toBe('cancelled');
    expect((await acme.tasks.cancelByKey('client-k1')).status).toBe('cancelled');
    await fails(acme.tasks.cancelByKey('no-such-key'), 404, 'not_found');
    const started = await acme.tasks.enqueue({ task: 'noop' });
    const startedId = (started as { id: string }).id;
    for (let i = 0; i < 100 && (await acme.tasks.get(startedId)).status !== 'succeeded'; i++) await new Promise((r) => setTimeout(r, 100));
    await fails(acme.tasks.cancel(startedId), 409, 'conflict');
  });

  it('schedules: put, get, list, iterate, next, runs, pause, resume, delete', async () => {
    const { schedule, created } = await acme.schedules.put('client-daily', { cron: '0 9 * * *', timezone: 'Europe/Paris', task: 'noop' });
    expect(created).toBe(true);
    expect(schedule.kind).toBe('cron');
    expect((await acme.schedules.put('client-daily', { cron: '0 9 * * *', timezone: 'Europe/Paris', task: 'noop' })).created).toBe(false);
    await fails(acme.schedules.put('client-bad', { cron: 'nope', task: 'noop' }), 400, 'invalid_request', 'cron');
    await fails(acme.schedules.put('client-bad', { interval: 60, at: '2030-01-01T00:00:00Z', task: 'noop' }), 400, 'invalid_request', 'at');
    await acme.schedules.put('client-hourly', { interval: 3600, task: 'noop' });

    expect((await acme.schedules.get('client-daily')).name).toBe('client-daily');
    await fails(other.schedules.get('client-daily'), 404, 'not_found');
    expect((await acme.schedules.list({ limit: 1 })).nextCursor).not.toBeNull();
    await fails(acme.schedules.list({ limit: 0 }), 400, 'invalid_request', 'limit');
    const names: string[] = [];
    for await (const s of acme.schedules.iterate()) names.push(s.name);
    expect(names).toEqual(['client-daily', 'client-hourly']);

    const times = await acme.schedules.next('client-daily', 3);
    expect(times).toHaveLength(3);
    for (const t of times) expect(new Date(t).getUTCHours()).toBeOneOf([7, 8]); // 09:00 Paris, summer or winter
    await fails(acme.schedules.next('client-daily', 0), 400, 'invalid_request', 'count');
    expect((await acme.schedules.runs('client-daily')).items).toEqual([]);
    await fails(acme.schedules.runs('missing'), 404, 'not_found');

    expect((await acme.schedules.pause('client-daily')).enabled).toBe(false);
    expect((await acme.schedules.resume('client-daily')).enabled).toBe(true);
    await fails(acme.schedules.pause('missing'), 404, 'not_found');
    await fails(acme.schedules.resume('missing'), 404, 'not_found');
    expect((await acme.schedules.delete('client-hourly')).name).toBe('client-hourly');
    await fails(acme.schedules.delete('client-hourly'), 404, 'not_found');
  });

  it('signing secret: each tenant its own, rotation keeps the old one for the overlap', async () => {
    const mine = await acme.signingSecret.get();
    expect(mine.secret).toMatch(/^whsec_/);
    expect(await acme.signingSecret.get()).toEqual(mine);
    expect((await other.signingSecret.get()).secret).not.toBe(mine.secret);
    const rotated = await acme.signingSecret.rotate(60);
    expect(rotated.previous?.secret).toBe(mine.secret);
    expect(await acme.signingSecret.get()).toEqual(rotated);
    const atOnce = await acme.signingSecret.rotate(0);
    expect(atOnce.previous).toBeUndefined();
    await fails(acme.signingSecret.rotate(-5), 400, 'invalid_request', 'rotationOverlapSeconds');
  });

  it('queues and admin routes', async () => {
    const queues = await acme.queues.list();
    expect(queues.map((q) => q.name).sort()).toEqual(['client-q', 'default']);
    expect(await admin.admin.setTenantWeight('client-acme', 2, 'client-q')).toEqual({ tenant: 'client-acme', queue: 'client-q', weight: 2 });
    await fails(admin.admin.setTenantWeight('client-acme', -1), 400, 'invalid_request', 'weight');
    expect(await admin.admin.setQueuePaused('client-q', true)).toEqual({ name: 'client-q', paused: true });
    expect((await acme.queues.list()).find((q) => q.name === 'client-q')!.paused).toBe(true);
    await admin.admin.setQueuePaused('client-q', false);
    await fails(admin.admin.setQueuePaused('no spaces', true), 400, 'invalid_request', 'name');
    await fails(acme.admin.createKey('client-acme'), 401, 'unauthorized');

    const key = await admin.admin.createKey('client-temp');
    const temp = workerClient({ key: key.key });
    expect(await temp.queues.list()).toEqual([]);
    expect((await admin.admin.revokeKey(key.id)).revokedAt).not.toBeNull();
    await fails(temp.queues.list(), 401, 'unauthorized');
    await fails(admin.admin.revokeKey('999999999'), 404, 'not_found');
  });

  it('limits: a body over 1 MiB is refused with 413', async () => {
    await fails(acme.tasks.enqueue({ task: 'noop', payload: { blob: 'x'.repeat(1_100_000) } }), 413, 'payload_too_large');
  });
});
