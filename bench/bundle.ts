// The Worker bundle as `wrangler deploy --dry-run` builds it (offline): the
// raw size of every .js module in the out dir and its gzip size (zlib level
// 9, as the upload limit counts compressed bytes), beside wrangler's own
// "Total Upload / gzip" line; and the dashboard's assets beside it.
import { spawn } from 'node:child_process';
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import { buildDashboard, measureDashboard, type DashboardSize } from '../scripts/dashboard.ts';
import { root, tempDir } from './server.ts';

export interface BundleSize {
  rawBytes: number;
  gzipBytes: number;
  wranglerReported: string | null;
  files: string[];
  /** The dashboard's static assets (served by the same Worker, not part of its script). */
  dashboard: DashboardSize;
}

export async function measureBundle(): Promise<BundleSize> {
  await buildDashboard();
  const dashboard = await measureDashboard();
  const dir = await tempDir('scheduler-bench-bundle-');
  try {
    const out = await new Promise<string>((resolve, reject) => {
      const child = spawn(process.execPath, [join(root, 'node_modules/wrangler/bin/wrangler.js'), 'deploy', '--dry-run', '--outdir', dir.path], {
        cwd: root,
        env: { ...process.env, WRANGLER_SEND_METRICS: 'false', CLOUDFLARE_SEND_METRICS: 'false', NO_COLOR: '1' },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let text = '';
      child.stdout.on('data', (d: Buffer) => (text += d.toString()));
      child.stderr.on('data', (d: Buffer) => (text += d.toString()));
      child.once('error', reject);
      child.once('exit', (code) => (code === 0 ? resolve(text) : reject(new Error(`wrangler deploy --dry-run exited ${code}: ${text.slice(-500)}`))));
    });
    const files = (await readdir(dir.path)).filter((f) => /\.(m?js|wasm)$/.test(f));
    let rawBytes = 0;
    let gzipBytes = 0;
    for (const f of files) {
      const buf = await readFile(join(dir.path, f));
      rawBytes += buf.length;
      gzipBytes += gzipSync(buf, { level: 9 }).length;
    }
    const m = /Total Upload: ([\d.]+ KiB) \/ gzip: ([\d.]+ KiB)/.exec(out);
    return { rawBytes, gzipBytes, wranglerReported: m ? `${m[1]} / gzip ${m[2]}` : null, files, dashboard };
  } finally {
    await dir.remove();
  }
}
