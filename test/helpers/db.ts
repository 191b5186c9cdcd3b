// A fresh database per test file, cloned from the migrated template.
import { afterAll, beforeAll, inject } from 'vitest';
import { openNodeDb } from '../../scripts/node-db.ts';
import type { Db } from '../../src/db/seam.ts';
import { databaseUrl } from '../setup/global.ts';

export interface TestDatabase {
  db: Db;
  url: string;
  name: string;
  /** Opens another Db on the same database (e.g. a second worker). */
  open(options?: { maxConnections?: number; applicationName?: string }): Promise<Db>;
  close(): Promise<void>;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export async function createTestDatabase(options: { maxConnections?: number } = {}): Promise<TestDatabase> {
  const wsProxy = inject('wsProxy');
  const name = `sched_t${Math.random().toString(36).slice(2, 10)}_${inject('runId')}`;
  const admin = await openNodeDb(inject('adminDatabaseUrl'), { wsProxy, maxConnections: 1 });
  try {
    for (let attempt = 1; ; attempt++) {
      try {
        await admin.query(`create database ${name} template ${inject('templateDatabase')}`);
        break;
      } catch (error) {
        // Another file is cloning the same template at this instant.
        if ((error as { code?: string }).code !== '55006' || attempt >= 50) throw error;
        await sleep(50 + Math.random() * 100);
      }
    }
  } finally {
    await admin.close();
  }
  const url = databaseUrl(inject('adminDatabaseUrl'), name);
  const opened: Db[] = [];
  const open = async (o: { maxConnections?: number; applicationName?: string } = {}) => {
    const db = await openNodeDb(url, { wsProxy, maxConnections: o.maxConnections ?? 10, applicationName: o.applicationName });
    opened.push(db);
    return db;
  };
  const db = await open({ maxConnections: options.maxConnections });
  return {
    db,
    url,
    name,
    open,
    async close() {
      await Promise.all(opened.map((d) => d.close().catch(() => {})));
    },
  };
}

/**
 * A database of this test file's own: created before its tests, closed after.
 * The returned object is usable from inside hooks and tests.
 */
export function useTestDatabase(options: { maxConnections?: number } = {}): TestDatabase {
  let real: TestDatabase | undefined;
  const get = () => {
    if (!real) throw new Error('useTestDatabase: the database exists only inside hooks and tests');
    return real;
  };
  beforeAll(async () => {
    real = await createTestDatabase(options);
  });
  afterAll(async () => {
    await real?.close();
  });
  return {
    get db() {
      return get().db;
    },
    get url() {
      return get().url;
    },
    get name() {
      return get().name;
    },
    open: (o) => get().open(o),
    close: () => get().close(),
  };
}

/** Empties every table a test writes, between tests of one file. */
export async function resetTables(db: Db): Promise<void> {
  await db.query(
    'truncate tasks, task_attempts, tenants, tenant_quotas, queues, spent_idempotency_keys, task_events, schedules, api_keys, signing_secrets, concurrency_slots, concurrency_frees, rate_limits, rate_start_lines, tenant_pending_counts restart identity cascade',
  );
  // A truncate forgets the statistics: analyzed again, the flow-control
  // tables plan as migration 0036 leaves them in production (not as ten pages).
  await db.query('analyze concurrency_slots, concurrency_frees');
  await db.query(`update dispatcher_slots set token = null, holder = null, acquired_at = null, expires_at = '-infinity'`);
}

/** The instant most tests start from, and seconds after it. */
export const T0 = new Date('2026-12-01T12:00:00.000Z');
export const at = (seconds: number) => new Date(T0.getTime() + seconds * 1000);

/**
 * Holds row locks from a connection of its own, as another worker would:
 * runs `statements` in a transaction left open until the returned function
 * is called (it ends the transaction and closes the connection).
 */
export async function holdLocks(
  t: TestDatabase,
  statements: readonly (readonly [text: string, values?: readonly unknown[]])[],
): Promise<() => Promise<void>> {
  const other = await t.open({ maxConnections: 1 });
  let release!: () => void;
  const held = new Promise<void>((r) => (release = r));
  let locked!: () => void;
  const isLocked = new Promise<void>((r) => (locked = r));
  const holder = other.transaction(async (tx) => {
    for (const [text, values] of statements) await tx.query(text, values);
    locked();
    await held;
  });
  await Promise.race([isLocked, holder]);
  return async () => {
    release();
    await holder;
    await other.close();
  };
}

