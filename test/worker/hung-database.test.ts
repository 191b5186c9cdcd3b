// A hung database through the real Worker (issue 10, finding 5): the server
// accepts connections and never answers. Requests answer 503
// database_unavailable within the connect timeout instead of hanging, and the
// consumer leaves its batch to the Queue's retry.
import { createExecutionContext, createMessageBatch, getQueueResult, waitOnExecutionContext } from 'cloudflare:test';
import { env } from 'cloudflare:workers';
import { describe, expect, it } from 'vitest';
import worker from '../../functions/index.ts';
import { createNeonDb } from '../../src/db/neon.ts';
import { createPgDb } from '../../src/db/pg.ts';
import { adminHeaders, BASE } from '../helpers/workerd.ts';
import { envWithDatabase } from './databases.ts';

const hungEnv = () =>
  envWithDatabase(`postgres://nobody:secret@${env.HUNG_ADDRESS}/none`, { DB_CONNECT_TIMEOUT_MS: '400', DB_STATEMENT_TIMEOUT_MS: '400' });

/** A timed request to the Worker with the hung database's env (the shared `api` goes through `exports.default`, bound to the test env). */
async function call(path: string, init: RequestInit = {}) {
  const ctx = createExecutionContext();
  const started = Date.now();
  const res = await worker.fetch(new Request(`${BASE}${path}`, init) as never, hungEnv(), ctx);
  const body = (await res.json()) as any;
  const ms = Date.now() - started;
  await waitOnExecutionContext(ctx);
  return { status: res.status, body, ms };
}

describe('a hung database, through the Worker', () => {
  it('GET /healthz answers 503 database_unavailable within the timeout', async () => {
    const r = await call('/healthz');
    expect(r.status).toBe(503);
    expect(r.body.error.code).toBe('database_unavailable');
    expect(r.ms).toBeLessThan(5_000);
  });

  it('POST /v1/tasks answers 503 database_unavailable within the timeout', async () => {
    const r = await call('/v1/tasks', {
      method: 'POST',
      headers: adminHeaders('hung'),
      body: JSON.stringify({ task: 'noop' }),
    });
    expect(r.status).toBe(503);
    expect(r.body.error.code).toBe('database_unavailable');
    expect(r.ms).toBeLessThan(5_000);
  });

  it('the consumer retries its whole batch', async () => {
    const batch = createMessageBatch('edge-scheduler-tasks', [
      { id: 'h1', timestamp: new Date(), attempts: 1, body: { id: '1', epoch: 1, runAt: 0 } },
      { id: 'h2', timestamp: new Date(), attempts: 1, body: { id: '2', epoch: 1, runAt: 0 } },
    ]);
    const ctx = createExecutionContext();
    const started = Date.now();
    await worker.queue(batch as never, hungEnv(), ctx);
    const result = await getQueueResult(batch, ctx);
    expect(Date.now() - started).toBeLessThan(5_000);
    expect(result.explicitAcks).toEqual([]);
    expect(result.retryMessages.map((m) => m.msgId).sort()).toEqual(['h1', 'h2']);
  });
});

describe('a statement that never answers, inside workerd', () => {
  // The connection that missed its answer is destroyed. Its socket reader then
  // fails ("This socket has been closed" on the Hyperdrive path), after the
  // pool has let go of the client: the adapter's lifelong error listener on
  // every client is what keeps that from becoming an unhandled rejection,
  // which vitest reports as a failed run.
  it('fails as database_unavailable and the next statement runs on a fresh connection', async () => {
    const db =
      env.EXPECTED_TRANSPORT === 'hyperdrive'
        ? createPgDb({ connectionString: (env.HYPERDRIVE as Hyperdrive).connectionString, statementTimeoutMs: 300 })
        : createNeonDb({ connectionString: env.DATABASE_URL, wsProxy: env.DATABASE_WS_PROXY, statementTimeoutMs: 300 });
    try {
      const started = Date.now();
      await expect(db.query('select pg_sleep(3)')).rejects.toMatchObject({ code: 'database_unavailable' });
      expect(Date.now() - started).toBeLessThan(2_500);
      expect(await db.query<{ one: number }>('select 1 as one')).toEqual([{ one: 1 }]);
      expect(db.connections?.()).toBe(2);
    } finally {
      await db.close();
    }
    // Let the destroyed socket's reader settle inside this test.
    await new Promise((resolve) => setTimeout(resolve, 3_500));
  });
});
