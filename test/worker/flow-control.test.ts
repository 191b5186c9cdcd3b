// Flow control through the Worker (issue 16): the http task under a
// concurrency limit and under a rate limit, seen from the receiving end.
import { env, exports } from 'cloudflare:workers';
import { createClient } from '../../packages/client/src/index.ts';
import { describe, expect, it } from 'vitest';
import { adminHeaders, sweep } from '../helpers/workerd.ts';

const tenant = `worker-flow-${crypto.randomUUID().slice(0, 8)}`;
const headers = adminHeaders(tenant);
const api = async (method: string, path: string, body?: unknown) => {
  const res = await exports.default.fetch(`https://scheduler.test${path}`, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: res.status, body: (await res.json()) as any };
};
const client = createClient({
  baseUrl: 'https://scheduler.test',
  key: env.ADMIN_TOKEN,
  tenant,
  fetch: (request) => exports.default.fetch(request),
});

describe('concurrency limits through the Worker', () => {
  it('a receiver counting overlapping requests sees at most the limit', async () => {
    const path = `/hook/slow/${crypto.randomUUID()}`;
    const tasks = Array.from({ length: 10 }, () => ({
      task: 'http',
      payload: { url: `${env.RECEIVER_URL}${path}` },
      concurrency: { key: 'partner', limit: 2 },
    }));
    const r = await api('POST', '/v1/tasks/batch', { tasks });
    expect(r.status).toBe(201);
    const ids: string[] = r.body.tasks.map((t: { id: string }) => t.id);

    const deadline = Date.now() + 30_000;
    let done = 0;
    while (Date.now() < deadline) {
      await sweep();
      const states = await Promise.all(ids.map(async (id) => (await api('GET', `/v1/tasks/${id}`)).body.status));
      done = states.filter((s) => s === 'succeeded').length;
      if (done === ids.length) break;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    expect(done).toBe(ids.length);
    const overlap = (await (await fetch(`${env.RECEIVER_URL}/_overlap?path=${encodeURIComponent(path)}`)).json()) as { peak: number };
    expect(overlap.peak).toBeGreaterThanOrEqual(1);
    expect(overlap.peak).toBeLessThanOrEqual(2);
    expect(await client.concurrency.get('partner')).toEqual({ key: 'partner', running: 0, limit: 2, waiting: 0 });
    await expect(client.concurrency.get('nope')).rejects.toMatchObject({ status: 404 });
  }, 60_000);
});

describe('rate limits through the Worker', () => {
  it("a rate-limited key's receiver sees the spacing: 6 requests at 2 per second arrive about 500 ms apart", async () => {
    const path = `/hook/ok/${crypto.randomUUID()}`;
    const tasks = Array.from({ length: 6 }, () => ({
      task: 'http',
      payload: { url: `${env.RECEIVER_URL}${path}` },
      rateLimit: { key: 'partner-rate', limit: 2, periodSeconds: 1 },
    }));
    const r = await api('POST', '/v1/tasks/batch', { tasks });
    expect(r.status).toBe(201);
    const ids: string[] = r.body.tasks.map((t: { id: string }) => t.id);
    const deadline = Date.now() + 30_000;
    let done = 0;
    while (Date.now() < deadline) {
      await sweep();
      const states = await Promise.all(ids.map(async (id) => (await api('GET', `/v1/tasks/${id}`)).body));
      done = states.filter((s) => s.status === 'succeeded').length;
      if (done === ids.length) {
        expect(states.every((s) => s.attempts === 1)).toBe(true);
        break;
      }
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    expect(done).toBe(ids.length);
    const deliveries = (await (await fetch(`${env.RECEIVER_URL}/_deliveries?path=${encodeURIComponent(path)}`)).json()) as { at: number }[];
    expect(deliveries.length).toBe(6);
    const at = deliveries.map((d) => d.at).sort((a, b) => a - b);
    const gaps = at.slice(1).map((t, i) => t - at[i]!);
    // Started on the line 500 ms apart; the request itself adds a few ms of jitter.
    for (const gap of gaps) expect(gap).toBeGreaterThanOrEqual(400);
    expect(at[5]! - at[0]!).toBeGreaterThanOrEqual(2_400);
    expect(await client.rateLimits.get('partner-rate')).toMatchObject({ key: 'partner-rate', limit: 2, periodSeconds: 1, waiting: 0 });
    await expect(client.rateLimits.get('nope')).rejects.toMatchObject({ status: 404 });
  }, 60_000);
});
