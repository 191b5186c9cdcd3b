// S18 through the real Worker (issue 10, finding 2): one batch from the real
// local Queue holds an http task whose receiver holds the request open, and
// neighbours with 1 s timeouts, at-least-once and at-most-once. Every
// neighbour is stored while the slow one still runs; then their leases are
// expired (time travel by lease) and the reaper runs: it finds nothing of
// theirs, and each neighbour ends succeeded, attempt 1, delivered once.
import { env } from 'cloudflare:workers';
import { describe, expect, it } from 'vitest';
import { createNeonDb } from '../../src/db/neon.ts';
import { api, deliveries, getTask, sweep, until } from '../helpers/workerd.ts';

const tenant = 'worker-neighbours';

describe('a slow task beside fast neighbours in one Queue batch', () => {
  it('every neighbour succeeds once, attempt 1, long before the slow one ends', async () => {
    const queue = `neighbours-${crypto.randomUUID()}`;
    const holdPath = `/hook/hold/${crypto.randomUUID()}`;
    const okPaths = [1, 2, 3, 4].map(() => `/hook/ok/${crypto.randomUUID()}`);
    const r = await api('POST', '/v1/tasks/batch', {
      tenant,
      body: {
        tasks: [
          { task: 'http', queue, timeout: 60, payload: { url: `${env.RECEIVER_URL}${holdPath}` } },
          ...okPaths.map((p, i) => ({
            task: 'http',
            queue,
            timeout: 1,
            delivery: i % 2 === 0 ? 'at_least_once' : 'at_most_once',
            payload: { url: `${env.RECEIVER_URL}${p}` },
          })),
        ],
      },
    });
    expect(r.status).toBe(201);
    const [slow, ...fast] = r.body.tasks.map((t: { id: string }) => t.id) as string[];

    // The enqueue's dispatch sent all five in one sendBatch; the slow one's
    // request is now held open by the receiver.
    const held = await until(() => deliveries(holdPath), (d) => d.length === 1, 20_000, 50);
    expect(held).toHaveLength(1);
    const status = (id: string) => getTask(id, tenant);
    const settled = await until(
      () => Promise.all(fast.map(status)),
      (ts) => ts.every((t) => t.status === 'succeeded'),
      5_000,
      50,
    );
    expect(settled.map((t) => t.status)).toEqual(['succeeded', 'succeeded', 'succeeded', 'succeeded']);
    expect((await status(slow!)).status).toBe('running');

    // Time travel by lease: every neighbour's lease is over; the reaper runs.
    const db = createNeonDb({ connectionString: env.DATABASE_URL, wsProxy: env.DATABASE_WS_PROXY });
    try {
      await db.query(
        `update tasks set lease_expires_at = now() - interval '1 second'
         where tenant = $1::text and queue = $2::text and status = 'running' and id <> $3::bigint`,
        [tenant, queue, slow],
      );
    } finally {
      await db.close();
    }
    await sweep();

    await fetch(`${env.RECEIVER_URL}/_release?path=${encodeURIComponent(holdPath)}`, { method: 'POST' });
    const slowDone = await until(() => status(slow!), (t) => t.status === 'succeeded', 20_000, 50);
    expect(slowDone).toMatchObject({ status: 'succeeded', attempts: 1 });
    for (const [i, id] of fast.entries()) {
      const t = await status(id);
      expect(t, id).toMatchObject({ status: 'succeeded', attempts: 1, lastError: null });
      expect(Date.parse(t.finishedAt)).toBeLessThan(Date.parse(slowDone.finishedAt));
      expect(await deliveries(okPaths[i]!)).toHaveLength(1);
    }
  });
});
