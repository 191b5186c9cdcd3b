// A hung database (issue 10, finding 5; RELIABILITY S20): a server that
// accepts connections and never answers must not hang a caller. Through the
// seam, over both transports: `database_unavailable` within the timeout, and a
// connection that missed an answer is never reused.
import { inject } from 'vitest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import ws from 'ws';
import { localProxy } from '../../scripts/node-db.ts';
import { createNeonDb } from '../../src/db/neon.ts';
import { createPgDb } from '../../src/db/pg.ts';
import type { Db } from '../../src/db/seam.ts';
import { AppError } from '../../src/errors.ts';
import { startHungServer, type HungServer } from '../helpers/hung-server.ts';
import { useTestDatabase } from '../helpers/db.ts';

const t = useTestDatabase();
let hung: HungServer;
let wsProxy: string;

beforeAll(async () => {
  hung = await startHungServer();
  wsProxy = inject('wsProxy') ?? (await localProxy()).address;
});
afterAll(async () => {
  await hung.close();
});

const withPassword = (url: string) => {
  const u = new URL(url);
  if (!u.password) u.password = 'unused';
  return u.toString();
};

const transports: Record<string, (url: string, timeouts: { connectTimeoutMs: number; statementTimeoutMs: number }) => Db> = {
  hyperdrive: (url, timeouts) => createPgDb({ connectionString: withPassword(url), maxConnections: 2, ...timeouts }),
  neon: (url, timeouts) => createNeonDb({ connectionString: url, wsProxy, webSocketConstructor: ws, maxConnections: 2, ...timeouts }),
};

/** Runs `work`, returning its error and how long it took to fail. */
async function failure(work: () => Promise<unknown>): Promise<{ error: unknown; ms: number }> {
  const started = performance.now();
  try {
    await work();
  } catch (error) {
    return { error, ms: performance.now() - started };
  }
  throw new Error('expected a failure');
}

describe.each(Object.keys(transports))('a hung database over %s', (name) => {
  const open = transports[name]!;

  it('a connection that never completes its start-up fails as database_unavailable within the connect timeout', async () => {
    const db = open(`postgres://nobody:secret@${hung.address}/none`, { connectTimeoutMs: 300, statementTimeoutMs: 60_000 });
    const acceptedBefore = hung.accepted();
    const query = await failure(() => db.query('select 1'));
    expect(hung.accepted()).toBeGreaterThan(acceptedBefore); // it did reach the server
    expect(query.error).toBeInstanceOf(AppError);
    expect((query.error as AppError).code).toBe('database_unavailable');
    expect(query.ms).toBeLessThan(3_000);
    const tx = await failure(() => db.transaction((q) => q.query('select 1')));
    expect((tx.error as AppError).code).toBe('database_unavailable');
    expect(tx.ms).toBeLessThan(3_000);
    const closing = performance.now();
    await db.close();
    expect(performance.now() - closing).toBeLessThan(3_000);
  });

  it('a statement that gets no answer fails within the statement timeout, and its connection is not reused', async () => {
    const db = open(t.url, { connectTimeoutMs: 5_000, statementTimeoutMs: 300 });
    try {
      const pid = (await db.query<{ pid: number }>('select pg_backend_pid() as pid'))[0]!.pid;
      const slow = await failure(() => db.query('select pg_sleep(30)'));
      expect((slow.error as AppError).code).toBe('database_unavailable');
      expect(slow.ms).toBeLessThan(3_000);
      const inTx = await failure(() => db.transaction((q) => q.query('select pg_sleep(30)')));
      expect((inTx.error as AppError).code).toBe('database_unavailable');
      expect(inTx.ms).toBeLessThan(3_000);
      // The next statement runs on a fresh connection, not behind the stuck one.
      const after = await db.query<{ pid: number }>('select pg_backend_pid() as pid');
      expect(after[0]!.pid).not.toBe(pid);
    } finally {
      await db.close();
      // The abandoned backends are still sleeping; end them.
      await t.db.query(`select pg_terminate_backend(pid) from pg_stat_activity where query = 'select pg_sleep(30)'`);
    }
  });
});
