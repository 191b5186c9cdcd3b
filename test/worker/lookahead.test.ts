// Issue 11 through the Worker (workerd, the real local Queue, the real 60 s
// look-ahead): user actions on work the sweep has already claimed and sent
// with a delay. Wall-clock waits stay at a few seconds: due times are near.
import { createExecutionContext, createMessageBatch, getQueueResult } from 'cloudflare:test';
import { env } from 'cloudflare:workers';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import worker, { type Env } from '../../functions/index.ts';
import { createNeonDb } from '../../src/db/neon.ts';
import type { Db } from '../../src/db/seam.ts';
import { api, deliveries, sweep, until } from '../helpers/workerd.ts';

const run = crypto.randomUUID().slice(0, 8);
let db: Db;

beforeAll(() => {
  db = createNeonDb({ connectionString: env.DATABASE_URL, wsProxy: env.DATABASE_WS_PROXY });
});
afterAll(async () => {
  await db.close();
});

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));


interface Row {
  id: string;
  status: string;
  lease_epoch: string;
  attempts: number;
  vtime: number | null;
  started_at: Date | null;
  dispatched_at: Date | null;
  run_at: Date;
  scheduled_for: Date | null;
}
const rows = (where: string, params: unknown[]) =>
  db.query<Row>(
    // dispatched_at as shown: a claimed task not started reads it from its batch's dispatch mark.
    `select id, status, lease_epoch, attempts, vtime, started_at,
            case when status = 'running' and started_at is null
                 then coalesce(dispatched_at, (select m.dispatched_at from dispatch_marks m where m.claim_token = tasks.claim_token))
                 else dispatched_at end as dispatched_at,
            run_at, scheduled_for from tasks where ${where} order by id`,
    params,
  );
const dbNow = async () => (await db.query<{ now: Date }>('select now() as now'))[0]!.now;

describe('reschedule by key after the sweep claimed and sent the task', () => {
  for (const lead of [5, 30, 59]) {
    it(`${lead} s before the due time: one run, at the new time, with the new payload`, async () => {
      const tenant = `la-resched-${lead}-${run}`;
      const path = `/hook/ok/resched-${lead}-${run}`;
      const key = `debounce-${lead}`;
      const url = `${env.RECEIVER_URL}${path}`;
      const first = await api('POST', '/v1/tasks', {
        tenant,
        body: { task: 'http', payload: { url, body: { v: 1 } }, delay: lead, idempotencyKey: key },
      });
      expect(first.status).toBe(201);
      await sweep();
      const [claimed] = await until(
        () => rows('id = $1::bigint', [first.body.id]),
        (r) => r[0]!.status === 'running' && r[0]!.dispatched_at !== null,
      );
      expect(claimed).toMatchObject({ status: 'running', attempts: 1 });
      const epoch = Number(claimed!.lease_epoch);
      // Claimed early and sent: the owner still sees it waiting.
      const shown = await api('GET', `/v1/tasks/${first.body.id}`, { tenant });
      expect(shown.body).toMatchObject({ status: 'queued', attempts: 0, dispatch: { epoch } });

      // Rescheduled by key to 3 s from now, with a new payload.
      const newRunAt = new Date((await dbNow()).getTime() + 3000);
      const again = await api('POST', '/v1/tasks', {
        tenant,
        body: { task: 'http', payload: { url, body: { v: 2 } }, runAt: newRunAt.toISOString(), idempotencyKey: key },
      });
      expect(again.status).toBe(200);
      expect(again.body.deduplicated).toBeUndefined();
      expect(again.body).toMatchObject({ id: first.body.id, status: 'queued', attempts: 0, dispatch: null, runAt: newRunAt.toISOString() });

      // The message in flight is stale: delivered now, it is acknowledged and skipped.
      const batch = createMessageBatch('edge-scheduler-tasks', [
        { id: `old-${lead}`, timestamp: Date.now(), attempts: 1, body: { id: first.body.id, epoch, runAt: 0 } },
      ]);
      const ctx = createExecutionContext();
      await worker.queue(batch as never, env as unknown as Env, ctx);
      expect((await getQueueResult(batch, ctx)).explicitAcks).toEqual([`old-${lead}`]);

      await sweep();
      const done = await until(
        () => api('GET', `/v1/tasks/${first.body.id}`, { tenant }),
        (r) => r.body.status === 'succeeded',
      );
      expect(done.body).toMatchObject({ status: 'succeeded', attempts: 1, payload: { url, body: { v: 2 } } });
      expect(Date.parse(done.body.startedAt)).toBeGreaterThanOrEqual(newRunAt.getTime());
      if (lead === 5) await sleep(Math.max(0, Date.parse(first.body.runAt) + 1500 - Date.now())); // the old message's own time passes
      const got = await deliveries(path);
      expect(got.map((d) => d.body)).toEqual(['{"v":2}']);
    });
  }
});

describe('schedules with occurrences already claimed', () => {
  it('pause a 3-second interval schedule: 0 fires after the pause answered', async () => {
    const tenant = `la-pause-${run}`;
    const path = `/hook/ok/pause-${run}`;
    const put = await api('PUT', '/v1/schedules/tick', {
      tenant,
      body: { interval: 3, task: 'http', payload: { url: `${env.RECEIVER_URL}${path}`, body: { v: 1 } } },
    });
    expect(put.status).toBe(201);
    await sweep();
    const claimed = await rows(`tenant = $1::text and status = 'running' and started_at is null`, [tenant]);
    expect(claimed.length).toBeGreaterThanOrEqual(19); // a minute of 3 s occurrences, sent with delays
    await sleep(3500); // let one or two fire

    const paused = await api('POST', '/v1/schedules/tick/pause', { tenant });
    expect(paused.status).toBe(200);
    const startedAtPause = (await rows(`tenant = $1::text and started_at is not null`, [tenant])).map((r) => r.id);
    const waiting = await rows(`tenant = $1::text and status in ('scheduled', 'queued', 'running') and started_at is null`, [tenant]);
    expect(waiting).toEqual([]);

    await sleep(7000);
    await sweep();
    const startedLater = (await rows(`tenant = $1::text and started_at is not null`, [tenant])).map((r) => r.id);
    expect(startedLater).toEqual(startedAtPause);
    expect((await deliveries(path)).length).toBe(startedAtPause.length);
    await api('DELETE', '/v1/schedules/tick', { tenant });
  });

  it("replace a schedule's payload: the next fire carries the new payload", async () => {
    const tenant = `la-replace-${run}`;
    const path = `/hook/ok/replace-${run}`;
    // Every 5 s: the first fire's message (sent with a 3 s delay) arrives after the replace.
    const body = (v: number) => ({ interval: 5, task: 'http', payload: { url: `${env.RECEIVER_URL}${path}`, body: { v } } });
    expect((await api('PUT', '/v1/schedules/tick', { tenant, body: body(1) })).status).toBe(201);
    await sweep();
    expect((await rows(`tenant = $1::text and status = 'running' and started_at is null`, [tenant])).length).toBeGreaterThanOrEqual(11);
    const replaced = await api('PUT', '/v1/schedules/tick', { tenant, body: body(2) });
    expect(replaced.status).toBe(200);
    await sweep();
    const got = await until(() => deliveries(path), (d) => d.length >= 1, 15_000);
    expect(got.length).toBeGreaterThanOrEqual(1);
    expect(new Set(got.map((d) => d.body))).toEqual(new Set(['{"v":2}']));
    await api('DELETE', '/v1/schedules/tick', { tenant });
  });
});

describe('pause a queue with tasks already sent', () => {
  it('none starts until the resume, then all start in order, no attempt spent', async () => {
    const tenant = `la-queue-${run}`;
    const queue = `la-q-${run}`;
    const path = (i: number) => `/hook/ok/queue-${run}-${i}`;
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) {
      const r = await api('POST', '/v1/tasks', {
        tenant,
        // Due in 8 s: sent with a 6 s delay, so the pause below comes first.
        body: { task: 'http', queue, payload: { url: `${env.RECEIVER_URL}${path(i)}`, body: { i } }, delay: 8 },
      });
      ids.push(r.body.id);
    }
    await sweep();
    const sent = await until(
      () => rows('id = any($1::bigint[])', [ids]),
      (r) => r.every((x) => x.status === 'running' && x.dispatched_at !== null),
    );
    expect(sent.map((r) => r.status)).toEqual(['running', 'running', 'running']);
    const vtimes = sent.map((r) => r.vtime);

    expect((await api('PUT', `/v1/admin/queues/${queue}`, { tenant, body: { paused: true } })).status).toBe(200);
    // The messages arrive (about 7 s); the fenced start refuses them.
    const refused = await until(
      () => rows('id = any($1::bigint[])', [ids]),
      (r) => r.every((x) => x.status === 'queued'),
      15_000,
    );
    expect(refused.map((r) => [r.status, r.attempts, r.started_at, r.dispatched_at])).toEqual([
      ['queued', 0, null, null],
      ['queued', 0, null, null],
      ['queued', 0, null, null],
    ]);
    expect(refused.map((r) => r.vtime)).toEqual(vtimes);
    await sweep(); // paused: nothing is claimed
    await sleep(1000);
    expect((await rows('id = any($1::bigint[])', [ids])).map((r) => r.status)).toEqual(['queued', 'queued', 'queued']);
    for (let i = 0; i < 3; i++) expect(await deliveries(path(i))).toEqual([]);

    expect((await api('PUT', `/v1/admin/queues/${queue}`, { tenant, body: { paused: false } })).status).toBe(200);
    await sweep();
    const done = await until(
      () => rows('id = any($1::bigint[])', [ids]),
      (r) => r.every((x) => x.status === 'succeeded'),
    );
    expect(done.map((r) => [r.status, r.attempts])).toEqual([
      ['succeeded', 1],
      ['succeeded', 1],
      ['succeeded', 1],
    ]);
    const starts = done.map((r) => r.started_at!.getTime());
    expect(starts).toEqual([...starts].sort((a, b) => a - b));
    for (let i = 0; i < 3; i++) expect((await deliveries(path(i))).map((d) => d.body)).toEqual([JSON.stringify({ i })]);
  });
});

describe('a message delivered 1.5 s before its run_at (the Queue rounds delays down): nothing starts before it', () => {
  /** Waits (wall clock) until the database clock reaches `t`. */
  const untilDbTime = async (t: number) => {
    for (;;) {
      const left = t - (await dbNow()).getTime();
      if (left <= 0) return;
      await sleep(Math.min(left, 1000));
    }
  };
  /** Hands the consumer a copy of the task's message now; resolves once the invocation ends. */
  function deliver(label: string, id: string, epoch: number) {
    const batch = createMessageBatch('edge-scheduler-tasks', [{ id: label, timestamp: Date.now(), attempts: 1, body: { id, epoch, runAt: 0 } }]);
    const ctx = createExecutionContext();
    return worker.queue(batch as never, env as unknown as Env, ctx).then(() => getQueueResult(batch, ctx));
  }
  const claimed = (id: string) =>
    until(
      () => rows('id = $1::bigint', [id]),
      (r) => r[0]!.status === 'running' && r[0]!.dispatched_at !== null,
    ).then((r) => r[0]!);
  const startedEarly = async (tenant: string) =>
    (await rows(`tenant = $1::text and started_at < run_at`, [tenant])).map((r) => r.id);

  it('a reschedule by key in that window answers 200 (not deduplicated); one run, at the new time, with the new payload', async () => {
    const tenant = `la-early-resched-${run}`;
    const path = `/hook/ok/early-resched-${run}`;
    const url = `${env.RECEIVER_URL}${path}`;
    const runAt = new Date((await dbNow()).getTime() + 4000);
    const first = await api('POST', '/v1/tasks', {
      tenant,
      body: { task: 'http', payload: { url, body: { v: 1 } }, runAt: runAt.toISOString(), idempotencyKey: 'debounce' },
    });
    expect(first.status).toBe(201);
    await sweep(); // claimed, sent with a 2 s delay (its own message also arrives a little early)
    const epoch = Number((await claimed(first.body.id)).lease_epoch);

    await untilDbTime(runAt.getTime() - 1500);
    const consumed = deliver('early-resched', first.body.id, epoch);
    await sleep(300);
    const [waiting] = await rows('id = $1::bigint', [first.body.id]);
    expect(waiting).toMatchObject({ status: 'running', started_at: null });
    expect((await api('GET', `/v1/tasks/${first.body.id}`, { tenant })).body).toMatchObject({ status: 'queued', startedAt: null });

    const newRunAt = new Date((await dbNow()).getTime() + 3000);
    const again = await api('POST', '/v1/tasks', {
      tenant,
      body: { task: 'http', payload: { url, body: { v: 2 } }, runAt: newRunAt.toISOString(), idempotencyKey: 'debounce' },
    });
    expect(again.status).toBe(200);
    expect(again.body.deduplicated).toBeUndefined();
    expect(again.body).toMatchObject({ id: first.body.id, status: 'queued', attempts: 0, dispatch: null, payload: { url, body: { v: 2 } } });
    // The consumer's start after its wait finds the epoch moved: acknowledged, skipped.
    expect((await consumed).explicitAcks).toEqual(['early-resched']);
    expect((await rows('id = $1::bigint', [first.body.id]))[0]!.started_at).toBeNull();

    await sweep();
    const done = await until(
      () => api('GET', `/v1/tasks/${first.body.id}`, { tenant }),
      (r) => r.body.status === 'succeeded',
    );
    expect(done.body).toMatchObject({ status: 'succeeded', attempts: 1, payload: { url, body: { v: 2 } } });
    expect(Date.parse(done.body.startedAt)).toBeGreaterThanOrEqual(newRunAt.getTime());
    expect((await deliveries(path)).map((d) => d.body)).toEqual(['{"v":2}']);
    expect(await startedEarly(tenant)).toEqual([]);
  });

  it('a queue paused in that window: nothing starts; back in its queue, no attempt spent; runs once after the resume', async () => {
    const tenant = `la-early-queue-${run}`;
    const queue = `la-eq-${run}`;
    const path = `/hook/ok/early-queue-${run}`;
    const runAt = new Date((await dbNow()).getTime() + 3000);
    const r = await api('POST', '/v1/tasks', {
      tenant,
      body: { task: 'http', queue, payload: { url: `${env.RECEIVER_URL}${path}`, body: { q: 1 } }, runAt: runAt.toISOString() },
    });
    expect(r.status).toBe(201);
    await sweep();
    const epoch = Number((await claimed(r.body.id)).lease_epoch);

    await untilDbTime(runAt.getTime() - 1500);
    const consumed = deliver('early-queue', r.body.id, epoch);
    await sleep(300);
    expect((await rows('id = $1::bigint', [r.body.id]))[0]).toMatchObject({ status: 'running', started_at: null });
    expect((await api('PUT', `/v1/admin/queues/${queue}`, { tenant, body: { paused: true } })).status).toBe(200);
    expect((await consumed).explicitAcks).toEqual(['early-queue']);
    expect((await rows('id = $1::bigint', [r.body.id]))[0]).toMatchObject({ status: 'queued', attempts: 0, started_at: null });

    await untilDbTime(runAt.getTime() + 1500); // the sweep's own message has come and gone too
    await sweep();
    expect((await rows('id = $1::bigint', [r.body.id]))[0]).toMatchObject({ status: 'queued', attempts: 0, started_at: null });
    expect(await deliveries(path)).toEqual([]);

    expect((await api('PUT', `/v1/admin/queues/${queue}`, { tenant, body: { paused: false } })).status).toBe(200);
    await sweep();
    const [done] = await until(
      () => rows('id = $1::bigint', [r.body.id]),
      (x) => x[0]!.status === 'succeeded',
    );
    expect(done).toMatchObject({ status: 'succeeded', attempts: 1 });
    expect((await deliveries(path)).map((d) => d.body)).toEqual(['{"q":1}']);
    expect(await startedEarly(tenant)).toEqual([]);
  });

  it('a schedule paused in that window: the occurrence waiting out its last 1.5 s does not start, nor does any later one', async () => {
    const tenant = `la-early-sched-${run}`;
    const path = `/hook/ok/early-sched-${run}`;
    const put = await api('PUT', '/v1/schedules/tick', {
      tenant,
      body: { interval: 3, task: 'http', payload: { url: `${env.RECEIVER_URL}${path}`, body: { s: 1 } } },
    });
    expect(put.status).toBe(201);
    await sweep();
    const now = (await dbNow()).getTime();
    const next = (await rows(`tenant = $1::text and status = 'running' and started_at is null`, [tenant])).find(
      (x) => x.run_at.getTime() >= now + 2000,
    )!;
    expect(next).toBeDefined();

    await untilDbTime(next.run_at.getTime() - 1500);
    const consumed = deliver('early-sched', next.id, Number(next.lease_epoch));
    await sleep(300);
    expect((await rows('id = $1::bigint', [next.id]))[0]).toMatchObject({ status: 'running', started_at: null });
    const paused = await api('POST', '/v1/schedules/tick/pause', { tenant });
    expect(paused.status).toBe(200);
    const pausedAt = await dbNow();
    expect((await consumed).explicitAcks).toEqual(['early-sched']);

    await untilDbTime(next.run_at.getTime() + 3500); // its own message and the next occurrence's time pass
    await sweep();
    const started = await rows(`tenant = $1::text and started_at is not null`, [tenant]);
    expect(started.filter((x) => x.started_at!.getTime() >= pausedAt.getTime())).toEqual([]);
    expect(started.map((x) => x.id)).not.toContain(next.id);
    expect((await deliveries(path)).length).toBe(started.length);
    expect(await startedEarly(tenant)).toEqual([]);
    await api('DELETE', '/v1/schedules/tick', { tenant });
  });
});
