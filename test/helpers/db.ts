// A fresh database per test file, cloned from the migrated template.
import { inject } from 'vitest';
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
