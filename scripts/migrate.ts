// `npm run migrate`: applies migrations/ to DATABASE_URL (Neon or any Postgres).
import { loadMigrations } from './migrations.ts';
import { closeLocalProxy, openNodeDb } from './node-db.ts';
import { migrate } from '../src/db/migrate.ts';

const url = process.env.DATABASE_URL;
if (!url) {
  console.error('DATABASE_URL is not set: export DATABASE_URL=postgres://... and run again');
  process.exit(2);
}
const db = await openNodeDb(url, { maxConnections: 1 });
try {
  const result = await migrate(db, await loadMigrations());
  for (const name of result.applied) console.log(`applied  ${name}`);
  console.log(`${result.applied.length} applied, ${result.skipped.length} already applied`);
} catch (error) {
  console.error(`migration failed: ${error instanceof Error ? error.message : String(error)}`);
  process.exitCode = 1;
} finally {
  await db.close();
  await closeLocalProxy();
}
