// Flow control through the Worker (issue 16): the http task under a
// concurrency limit, seen from the receiving end.
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
    const client = createClient({
      baseUrl: 'https://scheduler.test',
      key: env.ADMIN_TOKEN,
      tenant,
      fetch: (request) => exports.default.fetch(request),
    });
    expect(await client.concurrency.get('partner')).toEqual({ key: 'partner', running: 0, limit: 2, waiting: 0 });
    await expect(client.concurrency.get('nope')).rejects.toMatchObject({ status: 404 });
  }, 60_000);
});
