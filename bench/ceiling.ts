// The physical ceiling of the same Postgres, measured with pgbench so no
// driver or queue is involved: single-row UPDATE transactions (clients =
// cores), UPDATEs of 100 rows per statement (rows/s), and new connections per
// second (pgbench -C), which bounds a design that opens one connection per
// Worker invocation. Each client updates its own slice of a small table, as a
// queue's SKIP LOCKED claims do, so the figures carry no lock waits.
import { spawn } from 'node:child_process';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Ctx } from './context.ts';
import { databaseOf, tempDir, withClient } from './server.ts';

export interface CeilingRun {
  tps: number;
  /** Rows changed per second (tps x rows per statement). */
  rowsPerSecond: number;
  /** Average connection time reported by pgbench -C, ms (connection runs only). */
  connectMs?: number;
}

const ROWS_PER_CLIENT = 10_000;

function pgbench(url: string, args: string[]): Promise<string> {
  const u = new URL(url);
  return new Promise((resolve, reject) => {
    const child = spawn(
      process.env.PGBENCH ?? 'pgbench',
      ['-h', u.hostname, '-p', u.port || '5432', '-U', decodeURIComponent(u.username), '-n', ...args, databaseOf(url)],
      { env: { ...process.env, PGPASSWORD: decodeURIComponent(u.password) }, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (out += d.toString()));
    child.once('error', reject);
    child.once('exit', (code) => (code === 0 ? resolve(out) : reject(new Error(`pgbench exited ${code}: ${out.slice(-500)}`))));
  });
}

function parseTps(out: string): number {
  const m = /tps = ([\d.]+) \((?:without initial connection time|including reconnection times)\)/.exec(out);
  if (!m) throw new Error(`pgbench: no tps in output: ${out.slice(-300)}`);
  return Number(m[1]);
}

/** Creates the small table; returns the database URL the runs use. */
export async function prepareCeiling(ctx: Ctx): Promise<string> {
  const url = await ctx.server.freshDatabase('bench_pgbench');
  const rows = ROWS_PER_CLIENT * ctx.settings.cores;
  await withClient(url, async (c) => {
    await c.query('create table ceiling (id int primary key, n bigint not null default 0) with (fillfactor = 90)');
    await c.query('insert into ceiling (id) select g from generate_series(0, $1::int - 1) g', [rows]);
    await c.query('vacuum analyze ceiling');
  });
  return url;
}

export async function runCeiling(ctx: Ctx, url: string, kind: 'single' | 'batch100' | 'connect', seconds: number): Promise<CeilingRun> {
  const dir = await tempDir('scheduler-bench-pgbench-');
  try {
    const clients = String(ctx.settings.cores);
    const script = join(dir.path, `${kind}.sql`);
    if (kind === 'single') {
      await writeFile(script, `\\set id :client_id * ${ROWS_PER_CLIENT} + random(0, ${ROWS_PER_CLIENT - 1})\nupdate ceiling set n = n + 1 where id = :id;\n`);
    } else if (kind === 'batch100') {
      await writeFile(
        script,
        `\\set lo :client_id * ${ROWS_PER_CLIENT} + random(0, ${ROWS_PER_CLIENT / 100 - 1}) * 100\nupdate ceiling set n = n + 1 where id between :lo and :lo + 99;\n`,
      );
    } else {
      await writeFile(script, 'select 1;\n');
    }
    const args = ['-c', clients, '-j', clients, '-T', String(seconds), '-f', script];
    if (kind === 'connect') args.unshift('-C');
    const out = await pgbench(url, args);
    const tps = parseTps(out);
    const connect = /average connection time = ([\d.]+) ms/.exec(out);
    return {
      tps,
      rowsPerSecond: tps * (kind === 'batch100' ? 100 : kind === 'single' ? 1 : 0),
      ...(kind === 'connect' && connect ? { connectMs: Number(connect[1]) } : {}),
    };
  } finally {
    await dir.remove();
  }
}
