import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { inject } from 'vitest';
import { loadMigrations } from '../../scripts/migrations.ts';
import { openNodeDb } from '../../scripts/node-db.ts';
import { migrate } from '../../src/db/migrate.ts';
import type { Db } from '../../src/db/seam.ts';
import { databaseUrl } from '../setup/global.ts';

// These tests start from an empty database, not the migrated template.
describe('migrate', () => {
  let admin: Db;
  const created: string[] = [];
  const emptyDb = async () => {
    const name = `sched_m${Math.random().toString(36).slice(2, 10)}_${inject('runId')}`;
    await admin.query(`create database ${name}`);
    created.push(name);
    return openNodeDb(databaseUrl(inject('adminDatabaseUrl'), name), { wsProxy: inject('wsProxy'), maxConnections: 4 });
  };

  beforeAll(async () => {
    admin = await openNodeDb(inject('adminDatabaseUrl'), { wsProxy: inject('wsProxy'), maxConnections: 1 });
  });
  afterAll(async () => {
    for (const name of created) await admin.query(`drop database if exists ${name} with (force)`);
    await admin.close();
  });

  it('applies every file once, in order, and a second run changes nothing', async () => {
    const db = await emptyDb();
    const migrations = await loadMigrations();
    expect(migrations.length).toBeGreaterThanOrEqual(2);
    const first = await migrate(db, migrations);
    expect(first.applied).toEqual(migrations.map((m) => m.name));
    const schemaBefore = await db.query(
      `select table_name, column_name, data_type from information_schema.columns where table_schema = 'public' order by 1, 2`,
    );
    const second = await migrate(db, migrations);
    expect(second.applied).toEqual([]);
    expect(second.skipped).toEqual(migrations.map((m) => m.name));
    const schemaAfter = await db.query(
      `select table_name, column_name, data_type from information_schema.columns where table_schema = 'public' order by 1, 2`,
    );
    expect(schemaAfter).toEqual(schemaBefore);
    const rows = await db.query<{ name: string }>('select name from schema_migrations order by name');
    expect(rows.map((r) => r.name)).toEqual(migrations.map((m) => m.name));
    await db.close();
  });

  it('two runners started at once apply each file exactly once', async () => {
    const db = await emptyDb();
    const other = await openNodeDb(databaseUrl(inject('adminDatabaseUrl'), created.at(-1)!), {
      wsProxy: inject('wsProxy'),
      maxConnections: 4,
    });
    const migrations = await loadMigrations();
    const [a, b] = await Promise.all([migrate(db, migrations), migrate(other, migrations)]);
    expect([...a.applied, ...b.applied].sort()).toEqual(migrations.map((m) => m.name).sort());
    expect(a.applied.filter((n) => b.applied.includes(n))).toEqual([]);
    await db.close();
    await other.close();
  });

  it('refuses to run when an applied file was edited, and applies nothing', async () => {
    const db = await emptyDb();
    const migrations = await loadMigrations();
    await migrate(db, migrations.slice(0, 1));
    const edited = migrations.map((m, i) => (i === 0 ? { ...m, text: `${m.text}\n-- edited` } : m));
    await expect(migrate(db, edited)).rejects.toThrow(/0001_data_model\.sql was edited/);
    const rows = await db.query<{ name: string }>('select name from schema_migrations');
    expect(rows.map((r) => r.name)).toEqual([migrations[0]!.name]);
    await db.close();
  });

  it('a failing file is rolled back whole and not recorded', async () => {
    const db = await emptyDb();
    const migrations = await loadMigrations();
    const broken = [...migrations, { name: '9999_broken.sql', text: 'create table half_done (id int); select 1/0;' }];
    await expect(migrate(db, broken)).rejects.toThrow(/division by zero/);
    const tables = await db.query(`select 1 from information_schema.tables where table_name = 'half_done'`);
    expect(tables).toEqual([]);
    const rows = await db.query<{ name: string }>('select name from schema_migrations order by name');
    expect(rows.map((r) => r.name)).toEqual(migrations.map((m) => m.name));
    await db.close();
  });
});
