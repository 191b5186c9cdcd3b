// Flow control through the Worker (issue 16): the http task under a
// concurrency limit and under a rate limit, seen from the receiving end.
import { env } from 'cloudflare:workers';
import { describe, expect, it } from 'vitest';
import { api, deliveries, getTask, sweepUntil, workerClient } from '../helpers/workerd.ts';

const tenant = `worker-flow-${crypto.randomUUID().slice(0, 8)}`;
const client = workerClient({ tenant });
/** Sweeps until every task of `ids` succeeded, or the time is up; their last states. */
const allSucceeded = (ids: string[]) =>
  sweepUntil(() => Promise.all(ids.map((id) => getTask(id, tenant))), (ts) => ts.every((t) => t.status === 'succeeded'), 30_000);

describe('concurrency limits through the Worker', () => {
  it('a receiver counting overlapping requests sees at most the limit', async () => {
    const path = `/hook/slow/${crypto.randomUUID()}`;
    const tasks = Array.from({ length: 10 }, () => ({
      task: 'http',
      payload: { url: `${env.RECEIVER_URL}${path}` },
      concurrency: { key: 'partner', limit: 2 },
    }));
    const r = await api('POST', '/v1/tasks/batch', { tenant, body: { tasks } });
    expect(r.status).toBe(201);
    const ids: string[] = r.body.tasks.map((t: { id: string }) => t.id);

    const states = await allSucceeded(ids);
    expect(states.filter((s) => s.status === 'succeeded').length).toBe(ids.length);
    const overlap = (await (await fetch(`${env.RECEIVER_URL}/_overlap?path=${encodeURIComponent(path)}`)).json()) as { peak: number };
    expect(overlap.peak).toBeGreaterThanOrEqual(1);
    expect(overlap.peak).toBeLessThanOrEqual(2);
    expect(await client.concurrency.get('partner')).toEqual({ key: 'partner', running: 0, limit: 2, waiting: 0 });
    await expect(client.concurrency.get('nope')).rejects.toMatchObject({ status: 404 });
  }, 60_000);
});

describe('rate limits through the Worker', () => {
  it("a rate-limited key's tasks start 500 ms apart at 2 per second, and no request reaches the receiver before its start", async () => {
    const path = `/hook/ok/${crypto.randomUUID()}`;
    const tasks = Array.from({ length: 6 }, () => ({
      task: 'http',
      payload: { url: `${env.RECEIVER_URL}${path}` },
      rateLimit: { key: 'partner-rate', limit: 2, periodSeconds: 1 },
    }));
    const r = await api('POST', '/v1/tasks/batch', { tenant, body: { tasks } });
    expect(r.status).toBe(201);
    const ids: string[] = r.body.tasks.map((t: { id: string }) => t.id);
    const states = await allSucceeded(ids);
    expect(states.filter((s) => s.status === 'succeeded').length).toBe(ids.length);
    expect(states.every((s) => s.attempts === 1)).toBe(true);
    // The start times the fenced start gave them (the database's clock): one
    // step of the line (1 s / 2) apart. Judged here rather than by arrival
    // gaps, which carry the machine's scheduling jitter.
    const starts = states.map((s) => Date.parse(s.startedAt)).sort((a, b) => a - b);
    for (let i = 1; i < starts.length; i++) expect(starts[i]! - starts[i - 1]!).toBeGreaterThanOrEqual(499);
    // The k-th request cannot arrive before the k-th start (one host clock; 50 ms for its coarseness).
    const got = await deliveries(path);
    expect(got.length).toBe(6);
    const at = got.map((d) => d.at).sort((a, b) => a - b);
    at.forEach((arrived, k) => expect(arrived).toBeGreaterThanOrEqual(starts[k]! - 50));
    expect(await client.rateLimits.get('partner-rate')).toMatchObject({ key: 'partner-rate', limit: 2, periodSeconds: 1, waiting: 0 });
    await expect(client.rateLimits.get('nope')).rejects.toMatchObject({ status: 404 });
  }, 60_000);
});
