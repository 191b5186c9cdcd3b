// The migration runner: applies numbered SQL files in order.
//
// Each file runs in its own transaction together with its bookkeeping row,
// under a transaction-level advisory lock, so two runners started at once
// never apply a file twice or interleave inside one. A file already applied
// is compared by checksum: an edited migration is refused rather than
// silently diverging from the databases that ran the original.
import type { Db } from './seam.ts';
import { sql } from './seam.ts';
import { sha256Hex } from '../crypto.ts';

export interface Migration {
  /** File name, e.g. `0001_data_model.sql`; the order is by name. */
  name: string;
  text: string;
}

export interface MigrateResult {
  applied: string[];
  skipped: string[];
}

/** An arbitrary constant: every runner locks the same key. */
const MIGRATION_LOCK_KEY = 7_240_331_911;

const createMigrationsTable = sql(
  'schema_migrations_create',
  `create table if not exists schema_migrations (
     name       text primary key,
     checksum   text not null,
     applied_at timestamptz not null default now()
   )`,
);
const lockMigrations = sql('schema_migrations_lock', `select pg_advisory_xact_lock($1::bigint)`);
const listAppliedMigrations = sql('schema_migrations_list', `select name, checksum from schema_migrations`);
const findAppliedMigration = sql('schema_migrations_find', `select 1 as applied from schema_migrations where name = $1::text`);
const insertAppliedMigration = sql(
  'schema_migrations_insert',
  `insert into schema_migrations (name, checksum) values ($1::text, $2::text)`,
);


export async function migrate(db: Db, migrations: readonly Migration[]): Promise<MigrateResult> {
  const ordered = [...migrations].sort((a, b) => a.name.localeCompare(b.name));
  const sums = new Map<string, string>();
  for (const m of ordered) sums.set(m.name, await sha256Hex(m.text));

  // Creating the table concurrently can race on the catalog; the lock serializes it.
  // Every applied file is verified before anything new is applied.
  await db.transaction(async (tx) => {
    await tx.query(lockMigrations, [MIGRATION_LOCK_KEY]);
    await tx.query(createMigrationsTable);
    for (const row of await tx.query<{ name: string; checksum: string }>(listAppliedMigrations)) {
      const expected = sums.get(row.name);
      if (expected !== undefined && expected !== row.checksum) {
        throw new Error(`migration ${row.name} was edited after it was applied (checksum differs); add a new migration instead`);
      }
    }
  });

  const result: MigrateResult = { applied: [], skipped: [] };
  for (const m of ordered) {
    await db.transaction(async (tx) => {
      await tx.query(lockMigrations, [MIGRATION_LOCK_KEY]);
      // Read after taking the lock: a runner that waited sees what the other applied.
      if ((await tx.query(findAppliedMigration, [m.name])).length > 0) {
        result.skipped.push(m.name);
        return;
      }
      await tx.query(m.text);
      await tx.query(insertAppliedMigration, [m.name, sums.get(m.name)]);
      result.applied.push(m.name);
    });
  }
  return result;
}
