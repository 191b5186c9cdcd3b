// Builds the dashboard (dashboard/ -> dashboard/dist/dashboard) with vite, the
// one build every path shares: `npm run build:dashboard` (before test and
// deploy), `npm start`, the bench and the browser tests.
import { existsSync } from 'node:fs';
import { readdir, readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { gzipSync } from 'node:zlib';
import { build } from 'vite';

const root = fileURLToPath(new URL('..', import.meta.url));
export const dashboardDist = join(root, 'dashboard/dist');

export async function buildDashboard(): Promise<void> {
  await build({ configFile: join(root, 'dashboard/vite.config.ts'), logLevel: 'warn' });
}

/** Builds only when no build is there (wrangler refuses to start without the assets directory). */
export async function ensureDashboardBuilt(): Promise<void> {
  if (!existsSync(join(dashboardDist, 'dashboard/index.html'))) await buildDashboard();
}

/**
 * Builds when the build is missing or older than a dashboard source (its
 * sources, index.html, the vite config): `npm start` keeps a fresh build, and
 * one started beside the tests never rewrites the assets they serve.
 */
export async function buildDashboardIfStale(): Promise<boolean> {
  const built = await stat(join(dashboardDist, 'dashboard/index.html')).catch(() => null);
  const dashboard = join(root, 'dashboard');
  const sources = [
    join(dashboard, 'index.html'),
    join(dashboard, 'vite.config.ts'),
    ...(await readdir(join(dashboard, 'src'), { recursive: true, withFileTypes: true }))
      .filter((e) => e.isFile())
      .map((e) => join(e.parentPath, e.name)),
  ];
  const newest = Math.max(...(await Promise.all(sources.map(async (f) => (await stat(f)).mtimeMs))));
  if (built && built.mtimeMs >= newest) return false;
  await buildDashboard();
  return true;
}

export interface DashboardSize {
  rawBytes: number;
  gzipBytes: number;
  files: string[];
}

/** Every file the browser loads, raw and gzip (level 9). */
export async function measureDashboard(): Promise<DashboardSize> {
  const files = (await readdir(dashboardDist, { recursive: true, withFileTypes: true }))
    .filter((e) => e.isFile())
    .map((e) => join(e.parentPath, e.name));
  let rawBytes = 0;
  let gzipBytes = 0;
  for (const f of files) {
    const buf = await readFile(f);
    rawBytes += buf.length;
    gzipBytes += gzipSync(buf, { level: 9 }).length;
  }
  return { rawBytes, gzipBytes, files: files.map((f) => f.slice(dashboardDist.length + 1)).sort() };
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) await buildDashboard();
