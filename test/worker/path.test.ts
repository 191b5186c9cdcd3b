// The Worker's three handlers inside workerd, with the real Neon driver (over
// the development proxy) and the real local Queue.
import { createExecutionContext, createMessageBatch, getQueueResult } from 'cloudflare:test';
import { env, exports } from 'cloudflare:workers';
import { describe, expect, it } from 'vitest';
import worker, { type Env } from '../../functions/index.ts';
import { createNeonDb } from '../../src/db/neon.ts';
import { api, BASE, sweep, waitForStatus } from '../helpers/workerd.ts';
import { envWithDatabase } from './databases.ts';

describe('the Worker, end to end', () => {
  it('healthz answers once the database is reachable', async () => {
    const r = await api('GET', '/healthz');
    expect(r.status).toBe(200);
    expect(r.body).toEqual({ ok: true, transport: env.EXPECTED_TRANSPORT });
  });

  it('an HTTP enqueue due now runs to succeeded through the real Queue', async () => {
    const tenant = 'worker-e2e-now';
    const r = await api('POST', '/v1/tasks', { tenant, body: { task: 'noop', payload: { n: 1 } } });
    expect(r.status).toBe(201);
    expect(r.body.status).toBe('queued');
    expect(r.headers.get('x-request-id')).toBeTruthy();
    // The enqueue kicked a dispatch in waitUntil; the local Queue delivers to
    // the queue handler, which records the result.
    const done = await waitForStatus(r.body.id, tenant, 'succeeded');
    expect(done.status).toBe('succeeded');
    expect(done.attempts).toBe(1);
    expect(done.startedAt).not.toBeNull();
  });

  it('the scheduled handler promotes, claims and dispatches work that became due', async () => {
    const tenant = 'worker-e2e-cron';
    // Beyond the look-ahead: stored as scheduled, nothing kicked.
    const r = await api('POST', '/v1/tasks', { tenant, body: { task: 'noop', delay: 3600 } });
    expect(r.status).toBe(201);
    expect(r.body.status).toBe('scheduled');
    // Let it fall due 1.5 s from now, as if an hour had passed.
    const db = createNeonDb({ connectionString: env.DATABASE_URL, wsProxy: env.DATABASE_WS_PROXY });
    await db.query(`update tasks set run_at = now() + interval '1.5 seconds' where id = $1::bigint`, [r.body.id]);
    await db.close();

    await sweep();
    const swept = await api('GET', `/v1/tasks/${r.body.id}`, { tenant });
    expect(swept.body.status).toMatch(/queued|running|succeeded/);
    // Claimed early and sent with a delay: shown as queued, the claim in `dispatch`, until it starts.
    if (swept.body.status === 'queued') expect(swept.body.dispatch.dispatchedAt).not.toBeNull();
    else expect(swept.body.dispatchedAt).not.toBeNull();

    const done = await waitForStatus(r.body.id, tenant, 'succeeded');
    expect(done.status).toBe('succeeded');
    // Sent with a delay rounded down; the consumer waited out the rest.
    expect(Date.parse(done.startedAt)).toBeGreaterThanOrEqual(Date.parse(done.runAt));
  });

  it('the queue handler acks stale messages and fenced results', async () => {
    const batch = createMessageBatch('edge-scheduler-tasks', [
      { id: 'm1', timestamp: Date.now(), attempts: 1, body: { id: '999999999', epoch: 3, runAt: 0 } },
      { id: 'm2', timestamp: Date.now(), attempts: 1, body: { nonsense: true } },
    ]);
    const ctx = createExecutionContext();
    await worker.queue(batch as never, env as unknown as Env, ctx);
    const result = await getQueueResult(batch, ctx);
    expect(result.explicitAcks.sort()).toEqual(['m1', 'm2']);
    expect(result.retryMessages).toEqual([]);
  });

  it('the queue handler runs pump messages (two per invocation; the rest go back to the Queue) beside task messages', async () => {
    const batch = createMessageBatch('edge-scheduler-tasks', [
      { id: 'p1', timestamp: Date.now(), attempts: 1, body: { kind: 'pump' } },
      { id: 's1', timestamp: Date.now(), attempts: 1, body: { id: '999999998', epoch: 1, runAt: 0 } },
      { id: 'p2', timestamp: Date.now(), attempts: 1, body: { kind: 'pump' } },
      { id: 'p3', timestamp: Date.now(), attempts: 1, body: { kind: 'pump' } },
    ]);
    const ctx = createExecutionContext();
    await worker.queue(batch as never, env as unknown as Env, ctx);
    const result = await getQueueResult(batch, ctx);
    expect(result.explicitAcks.sort()).toEqual(['p1', 'p2', 's1']);
    expect(result.retryMessages.map((m) => m.msgId)).toEqual(['p3']);
    // Both pumps gave their slot back.
    const db = createNeonDb({ connectionString: env.DATABASE_URL, wsProxy: env.DATABASE_WS_PROXY });
    const held = await db.query<{ n: number }>(`select count(*)::int as n from dispatcher_slots where holder like 'pump:%' and expires_at > now()`);
    await db.close();
    expect(held[0]!.n).toBe(0);
  });

  it('bad input answers 400 naming the field and stores nothing', async () => {
    const tenant = 'worker-e2e-bad';
    const cases: [string, string][] = [
      ['{not json', 'body'],
      [JSON.stringify({ payload: {} }), 'task'],
      [JSON.stringify({ task: 42 }), 'task'],
      [JSON.stringify({ task: 'noop', runAt: 'tomorrow' }), 'runAt'],
      [JSON.stringify({ task: 'noop', delay: 'soon' }), 'delay'],
      [JSON.stringify({ task: 'nope' }), 'task'],
      [JSON.stringify({ task: 'noop', surprise: 1 }), 'surprise'],
    ];
    for (const [body, field] of cases) {
      const r = await api('POST', '/v1/tasks', { tenant, raw: body });
      expect(r.status, body).toBe(400);
      expect(r.body.error.code, body).toBe('invalid_request');
      expect(r.body.error.details.map((d: { path: string }) => d.path), body).toContain(field);
    }
    const db = createNeonDb({ connectionString: env.DATABASE_URL, wsProxy: env.DATABASE_WS_PROXY });
    const stored = await db.query<{ n: number }>('select count(*)::int as n from tasks where tenant = $1::text', [tenant]);
    await db.close();
    expect(stored[0]!.n).toBe(0);
  });

  it('leaves the batch to the Queue when the database is unreachable', async () => {
    const batch = createMessageBatch('edge-scheduler-tasks', [
      { id: 'r1', timestamp: Date.now(), attempts: 1, body: { id: '1', epoch: 1, runAt: 0 } },
      { id: 'r2', timestamp: Date.now(), attempts: 1, body: { id: '2', epoch: 1, runAt: 0 } },
    ]);
    const ctx = createExecutionContext();
    const down = envWithDatabase('postgres://nobody:nothing@127.0.0.1:1/none');
    await worker.queue(batch as never, down, ctx);
    const result = await getQueueResult(batch, ctx);
    expect(result.explicitAcks).toEqual([]);
    expect(result.retryMessages.map((m) => m.msgId).sort()).toEqual(['r1', 'r2']);
  });

  it('cancels over HTTP by id and by idempotency key; 409 once finished, 404 for another tenant', async () => {
    const tenant = 'worker-e2e-cancel';
    const a = await api('POST', '/v1/tasks', { tenant, body: { task: 'noop', delay: 3600 } });
    const b = await api('POST', '/v1/tasks', { tenant, body: { task: 'noop', delay: 3600, idempotencyKey: 'invoice-9' } });
    expect((await api('DELETE', `/v1/tasks/${a.body.id}`, { tenant: 'someone-else' })).status).toBe(404);
    const ca = await api('DELETE', `/v1/tasks/${a.body.id}`, { tenant });
    expect(ca.status).toBe(200);
    expect(ca.body.status).toBe('cancelled');
    const cb = await api('DELETE', '/v1/tasks/by-key/invoice-9', { tenant });
    expect(cb.status).toBe(200);
    expect(cb.body).toMatchObject({ id: b.body.id, status: 'cancelled' });

    const c = await api('POST', '/v1/tasks', { tenant, body: { task: 'noop' } });
    await waitForStatus(c.body.id, tenant, 'succeeded');
    const late = await api('DELETE', `/v1/tasks/${c.body.id}`, { tenant });
    expect(late.status).toBe(409);
    expect(late.body.error.code).toBe('conflict');
  });

  it('refuses a missing or wrong token with 401', async () => {
    const res = await exports.default.fetch(`${BASE}/v1/tasks/1`, { headers: { authorization: 'Bearer wrong' } });
    expect(res.status).toBe(401);
    expect(((await res.json()) as any).error.code).toBe('unauthorized');
  });
});
