// Starts what the tests need, once per run: Postgres (embedded unless
// DATABASE_URL names a server), the WebSocket proxy, and a template database
// with every migration and the invariant triggers, which each test file clones.
import { chmod, mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TestProject } from 'vitest/node';
import { closeLocalProxy, localProxy, openNodeDb } from '../../scripts/node-db.ts';
import { loadMigrations } from '../../scripts/migrations.ts';
import { startEmbeddedPostgres, type RunningPostgres } from '../../scripts/postgres.ts';
import { migrate } from '../../src/db/migrate.ts';
import { startReceiver } from './receiver.ts';
import { startHungServer } from '../helpers/hung-server.ts';

declare module 'vitest' {
  export interface ProvidedContext {
    /** A URL to the server's maintenance database (CREATE DATABASE rights). */
    adminDatabaseUrl: string;
    /** The migrated template each test file clones. */
    templateDatabase: string;
    /** The database the workerd tests share (Neon transport project). */
    workerDatabaseUrl: string;
    /** The database of the workerd project that runs over Hyperdrive. */
    hyperdriveDatabaseUrl: string;
    /** `host:port` of a server that accepts connections and never answers (a hung database). */
    hungAddress: string;
    wsProxy: string;
    /** Suffix of every database this run creates, so teardown finds them. */
    runId: string;
    /** Base URL of the webhook receiver (test/setup/receiver.ts). */
    receiverUrl: string;
  }
}

export function databaseUrl(serverUrl: string, database: string): string {
  const u = new URL(serverUrl);
  u.pathname = `/${database}`;
  return u.toString();
}

export default async function setup(project: TestProject) {
  const runId = `${process.pid}_${Date.now().toString(36)}`;
  let pg: RunningPostgres | undefined;
  let dataDir: string | undefined;
  let serverUrl = process.env.DATABASE_URL;
  if (!serverUrl) {
    dataDir = await mkdtemp(join(tmpdir(), 'scheduler-test-pg-'));
    // As root, Postgres runs as the `postgres` user: it must reach its directory.
    await chmod(dataDir, 0o755);
    pg = await startEmbeddedPostgres({ dir: join(dataDir, 'data'), persistent: false });
    serverUrl = pg.url;
  }
  const proxy = await localProxy();
  const admin = await openNodeDb(serverUrl, { maxConnections: 1 });
  const version = (await admin.query<{ server_version: string }>('show server_version'))[0]!.server_version;
  console.log(`tests: PostgreSQL ${version}${pg ? ' (embedded)' : ' (DATABASE_URL)'}`);

  const template = `sched_tmpl_${runId}`;
  await admin.query(`create database ${template}`);
  const tdb = await openNodeDb(databaseUrl(serverUrl, template), { maxConnections: 1 });
  await migrate(tdb, await loadMigrations());
  await tdb.query(await readFile(new URL('./invariants.sql', import.meta.url), 'utf8'));
  await tdb.close();

  const workerDb = `sched_worker_${runId}`;
  await admin.query(`create database ${workerDb} template ${template}`);
  const hyperdriveDb = `sched_hyperdrive_${runId}`;
  await admin.query(`create database ${hyperdriveDb} template ${template}`);
  const hung = await startHungServer();

  project.provide('adminDatabaseUrl', serverUrl);
  project.provide('templateDatabase', template);
  project.provide('workerDatabaseUrl', databaseUrl(serverUrl, workerDb));
  project.provide('hyperdriveDatabaseUrl', databaseUrl(serverUrl, hyperdriveDb));
  project.provide('hungAddress', hung.address);
  project.provide('wsProxy', proxy.address);
  project.provide('runId', runId);
  const receiver = await startReceiver();
  project.provide('receiverUrl', receiver.url);

  return async () => {
    // Drop what this run created (on a shared server) or the whole server.
    if (!pg) {
      const dbs = await admin.query<{ datname: string }>(
        `select datname from pg_database where datname like $1`,
        [`sched\\_%\\_${runId}`],
      );
      for (const { datname } of dbs) await admin.query(`drop database if exists ${datname} with (force)`);
    }
    await admin.close();
    await receiver.close();
    await hung.close();
    await closeLocalProxy();
    if (pg) await pg.stop();
    if (dataDir) await rm(dataDir, { recursive: true, force: true });
  };
}
