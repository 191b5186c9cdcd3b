// The built-in http task end to end inside workerd: a delivery signed with its
// tenant's own secret that a Standard Webhooks receiver verifies (and no other
// tenant's secret does), both secrets during a rotation, a stable webhook-id
// across retries, and permanent failures.
import { env } from 'cloudflare:workers';
import { Webhook } from 'standardwebhooks';
import { describe, expect, it } from 'vitest';
import { api, deliveries, getTask, signingSecret, sweepUntil, until, type Delivery } from '../helpers/workerd.ts';

const TENANT = 'worker-http';
const enqueue = (body: unknown, tenant = TENANT) => api('POST', '/v1/tasks', { tenant, body });
const rotate = async (tenant: string, rotationOverlapSeconds: number) => {
  const r = await api('POST', '/v1/signing-secret/rotate', { tenant, body: { rotationOverlapSeconds } });
  expect(r.status).toBe(200);
  return r.body as { secret: string; previous?: { secret: string } };
};
const verifies = (secret: string, d: Delivery) => {
  try {
    new Webhook(secret).verify(d.body, d.headers);
    return true;
  } catch {
    return false;
  }
};
const task = (id: string, tenant = TENANT) => getTask(id, tenant);
const attempts = (id: string, tenant = TENANT) => api('GET', `/v1/tasks/${id}/attempts`, { tenant });

describe('the http task type', () => {
  it('delivers a request signed after Standard Webhooks; one changed byte fails verification', async () => {
    const path = `/hook/ok/${crypto.randomUUID()}`;
    const r = await enqueue({ task: 'http', payload: { url: `${env.RECEIVER_URL}${path}`, body: { order: 42 } } });
    expect(r.status).toBe(201);
    const done = await until(() => task(r.body.id), (t) => t.status === 'succeeded');
    expect(done.status).toBe('succeeded');
    // The result (issue 15): the response's status, content type and body.
    expect(done.result).toEqual({ status: 200, headers: {}, body: 'ok' });
    const history = await attempts(r.body.id);
    expect(history.body.attempts).toEqual([expect.objectContaining({ attempt: 1, outcome: 'succeeded', status: 200, error: null })]);
    expect((await attempts(r.body.id, 'worker-http-other')).status).toBe(404);

    const d = (await deliveries(path))[0]!;
    expect(d.method).toBe('POST');
    expect(d.body).toBe('{"order":42}');
    expect(d.headers['webhook-id']).toBe(r.body.id);
    const wh = new Webhook((await signingSecret(TENANT)).secret);
    expect(wh.verify(d.body, d.headers)).toEqual({ order: 42 });
    expect(() => wh.verify(d.body.replace('42', '43'), d.headers)).toThrow();
    // Neither another tenant's secret nor the Worker's SIGNING_SECRET (now only a key-encryption key) verifies it.
    expect(verifies((await signingSecret('worker-http-other')).secret, d)).toBe(false);
    expect(verifies(env.SIGNING_SECRET, d)).toBe(false);
  });

  it("signs with the tenant's old and new secrets during a rotation, with the new one only after a rotation without overlap", async () => {
    const tenant = `worker-rotate-${crypto.randomUUID().slice(0, 8)}`;
    const send = async () => {
      const path = `/hook/ok/${crypto.randomUUID()}`;
      const r = await enqueue({ task: 'http', payload: { url: `${env.RECEIVER_URL}${path}`, body: { tenant } } }, tenant);
      expect(r.status).toBe(201);
      expect((await until(() => task(r.body.id, tenant), (t) => t.status === 'succeeded')).status).toBe('succeeded');
      return (await deliveries(path))[0]!;
    };
    const first = await signingSecret(tenant);
    const rotated = await rotate(tenant, 3600);
    expect(rotated.previous?.secret).toBe(first.secret);
    const during = await send();
    expect(during.headers['webhook-signature']!.split(' ')).toHaveLength(2);
    expect(verifies(first.secret, during)).toBe(true);
    expect(verifies(rotated.secret, during)).toBe(true);

    const atOnce = await rotate(tenant, 0);
    expect(atOnce.previous).toBeUndefined();
    const after = await send();
    expect(verifies(atOnce.secret, after)).toBe(true);
    expect(verifies(rotated.secret, after)).toBe(false);
    expect(verifies(first.secret, after)).toBe(false);
  });

  it('retries a 503 honouring Retry-After, with the same webhook-id each time', async () => {
    const path = `/hook/busy/${crypto.randomUUID()}`;
    const r = await enqueue({ task: 'http', payload: { url: `${env.RECEIVER_URL}${path}` }, maxAttempts: 2 });
    // The retry becomes due a second later: fire the cron handler, as the ticker would.
    const done = await sweepUntil(() => task(r.body.id), (t) => t.status === 'dead', 30_000);
    expect(done).toMatchObject({ status: 'dead', attempts: 2 });
    expect(done.lastError).toMatch(/503/);
    const got = await deliveries(path);
    expect(got).toHaveLength(2);
    expect(new Set(got.map((d) => d.headers['webhook-id']))).toEqual(new Set([r.body.id]));
    const history = (await attempts(r.body.id)).body.attempts;
    expect(history.map((a: any) => [a.attempt, a.outcome, a.status])).toEqual([
      [1, 'failed', 503],
      [2, 'failed', 503],
    ]);
    expect(history[0].error).toEqual({ name: 'RetryAfterError', message: 'HTTP 503 Service Unavailable: busy' });
    expect(done.result).toBeNull();
  });

  it('a 404 is permanent: dead after one attempt', async () => {
    const path = `/hook/gone/${crypto.randomUUID()}`;
    const r = await enqueue({ task: 'http', payload: { url: `${env.RECEIVER_URL}${path}` } });
    const done = await until(() => task(r.body.id), (t) => t.status === 'dead');
    expect(done).toMatchObject({ status: 'dead', attempts: 1 });
    expect(done.lastError).toMatch(/404/);
  });

  it('a traceparent sent with the enqueue arrives at the receiver as its child, with the tracestate', async () => {
    const path = `/hook/ok/${crypto.randomUUID()}`;
    const traceparent = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';
    const r = await api('POST', '/v1/tasks', {
      tenant: TENANT,
      body: { task: 'http', payload: { url: `${env.RECEIVER_URL}${path}` } },
      headers: { traceparent, tracestate: 'rojo=00f067aa0ba902b7' },
    });
    expect(r.status).toBe(201);
    const done = await until(() => task(r.body.id), (t) => t.status === 'succeeded');
    expect(done.status).toBe('succeeded');
    const d = (await deliveries(path))[0]!;
    expect(d.headers.traceparent).toMatch(/^00-0af7651916cd43dd8448eb211c80319c-[0-9a-f]{16}-01$/);
    expect(d.headers.traceparent).not.toBe(traceparent);
    expect(d.headers.tracestate).toBe('rojo=00f067aa0ba902b7');
  });
});
