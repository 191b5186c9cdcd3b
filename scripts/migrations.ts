// Reads migrations/ from disk (Node only; the Worker never migrates).
import { readdir, readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import type { Migration } from '../src/db/migrate.ts';

export const migrationsDir = fileURLToPath(new URL('../migrations/', import.meta.url));

export async function loadMigrations(dir = migrationsDir): Promise<Migration[]> {
  const files = (await readdir(dir)).filter((f) => /^\d{4}_.*\.sql$/.test(f)).sort();
  return Promise.all(files.map(async (name) => ({ name, text: await readFile(`${dir}/${name}`, 'utf8') })));
}
