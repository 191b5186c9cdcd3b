// Completion callbacks (issue 15) through the Worker inside workerd: when a
// task with `callback` finishes, a durable http task POSTs the task as
// GET /v1/tasks/{id} shows it, signed with the tenant's secret
// (verifyWebhook of the typed client), webhook-id `<id>.callback`, once per
// terminal state, retried while the receiver fails.
import { env } from 'cloudflare:workers';
import { describe, expect, it } from 'vitest';
import { verifyWebhook } from '../../packages/client/src/webhooks.ts';
import { api, deliveries, signingSecret, sweep, sweepUntil } from '../helpers/workerd.ts';

const TENANT = 'worker-callbacks';
const call = (method: string, path: string, body?: unknown) => api(method, path, { tenant: TENANT, body });
const hook = (kind: string) => `/hook/${kind}/${crypto.randomUUID()}`;

describe('completion callbacks', () => {
  it('delivers once per terminal state the task as GET shows it, signed, webhook-id <id>.callback', async () => {
    const { secret } = await signingSecret(TENANT);
    const paths = { succeeded: hook('ok'), dead: hook('ok'), cancelled: hook('ok') };
    const ok = await call('POST', '/v1/tasks', { task: 'noop', payload: {}, callback: { url: `${env.RECEIVER_URL}${paths.succeeded}` } });
    const dead = await call('POST', '/v1/tasks', {
      task: 'http',
      payload: { url: `${env.RECEIVER_URL}${hook('gone')}` },
      callback: { url: `${env.RECEIVER_URL}${paths.dead}`, on: ['dead'] },
    });
    const cancelled = await call('POST', '/v1/tasks', { task: 'noop', delay: 3600, callback: { url: `${env.RECEIVER_URL}${paths.cancelled}` } });
    // Only `on` statuses call back: this one succeeds without a delivery.
    const quiet = hook('ok');
    const notOn = await call('POST', '/v1/tasks', { task: 'noop', callback: { url: `${env.RECEIVER_URL}${quiet}`, on: ['dead'] } });
    for (const r of [ok, dead, cancelled, notOn]) expect(r.status, JSON.stringify(r.body)).toBe(201);
    expect(ok.body.callback).toEqual({ url: `${env.RECEIVER_URL}${paths.succeeded}`, on: ['succeeded', 'dead', 'cancelled', 'missed'] });
    expect((await call('DELETE', `/v1/tasks/${cancelled.body.id}`)).status).toBe(200);

    for (const [status, original] of [
      ['succeeded', ok],
      ['dead', dead],
      ['cancelled', cancelled],
    ] as const) {
      const path = paths[status];
      const got = await sweepUntil(() => deliveries(path), (d) => d.length > 0);
      expect(got, status).toHaveLength(1);
      const [d] = got;
      expect(d!.method).toBe('POST');
      expect(d!.headers['webhook-id']).toBe(`${original.body.id}.callback`);
      await verifyWebhook({ secret, headers: d!.headers, body: d!.body });
      const shown = (await call('GET', `/v1/tasks/${original.body.id}`)).body;
      expect(shown.status).toBe(status);
      expect(JSON.parse(d!.body)).toEqual(shown);
      // Another tenant's secret does not verify it.
      const other = (await signingSecret('worker-callbacks-other')).secret;
      await expect(verifyWebhook({ secret: other, headers: d!.headers, body: d!.body })).rejects.toThrow();
    }
    expect(JSON.parse((await deliveries(paths.dead))[0]!.body).lastError).toMatch(/404/);

    // The callback is a task of its own (type http, callbackOf), done; nothing is sent twice.
    const list = (await call('GET', '/v1/tasks?task=http&limit=100')).body.tasks as any[];
    const cb = list.find((t) => t.callbackOf === ok.body.id);
    expect(cb).toMatchObject({ task: 'http', status: 'succeeded', callback: null });
    await sweep();
    await sweep();
    expect(await deliveries(paths.succeeded)).toHaveLength(1);
    expect(await deliveries(quiet)).toHaveLength(0);
    expect((await call('GET', `/v1/tasks/${notOn.body.id}`)).body.status).toBe('succeeded');
  });

  it('retries the callback while its receiver fails, with the same webhook-id', async () => {
    const path = hook('busy'); // 503, Retry-After: 1
    const r = await call('POST', '/v1/tasks', { task: 'noop', callback: { url: `${env.RECEIVER_URL}${path}` } });
    const got = await sweepUntil(() => deliveries(path), (d) => d.length >= 2, 30_000);
    expect(got.length).toBeGreaterThanOrEqual(2);
    expect(new Set(got.map((d) => d.headers['webhook-id']))).toEqual(new Set([`${r.body.id}.callback`]));
    const list = (await call('GET', '/v1/tasks?task=http&limit=100')).body.tasks as any[];
    const cb = list.find((t) => t.callbackOf === r.body.id);
    const attempts = (await call('GET', `/v1/tasks/${cb.id}/attempts`)).body.attempts as any[];
    expect(attempts[0]).toMatchObject({ outcome: 'failed', status: 503 });
  });

  it('refuses a callback URL that is not http(s), and a bad `on`, with 400 naming the field', async () => {
    const bad = await call('POST', '/v1/tasks', { task: 'noop', callback: { url: 'file:///etc/passwd' } });
    expect(bad.status).toBe(400);
    expect(bad.body.error.details.map((d: { path: string }) => d.path)).toContain('callback.url');
    const on = await call('POST', '/v1/tasks', { task: 'noop', callback: { url: 'https://example.com/cb', on: ['running'] } });
    expect(on.status).toBe(400);
    expect(on.body.error.details[0].path).toMatch(/^callback\.on/);
  });
});
