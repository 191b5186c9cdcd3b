// `npm run bench:ab -- <rev> [<rev> ...]`: the Worker of two or more git
// revisions (or `.` for the working tree) side by side under `wrangler dev`,
// over the transport phase's Hyperdrive stand-in (PgBouncer in session mode,
// BENCH_RTT_MS of delay behind it), in alternating rounds: a round measures
// every variant in turn, the order reversed every other round, so load from
// other work on a shared machine falls on all of them alike. Per round and
// variant: the enqueue's latency one at a time (p50), the enqueue's and the
// no-database route's throughput at 10 concurrent, and the CPU the Worker's
// workerd spent per request (from /proc: per request, it moves less with
// the machine's load than a rate does). Differences of a few percent need
// this; two runs of `npm run bench` minutes apart differ by more.
//
// Knobs: BENCH_RTT_MS (30), BENCH_AB_ROUNDS (6), BENCH_AB_LATENCY_REQUESTS
// (50 per round), BENCH_AB_REQUESTS (300 per throughput run). wrangler dev's
// local trace store is off, as in the transport phase (BENCH_LOCAL_OBSERVABILITY=1
// keeps it). Each revision's functions/, src/, packages/ and wrangler.toml
// are exported to a temporary directory that borrows this checkout's
// node_modules and dashboard build, so revisions with other dependencies
// are not comparable this way.
import { execFileSync } from 'node:child_process';
import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { ensureDashboardBuilt } from '../scripts/dashboard.ts';
import { startDelayProxy } from '../scripts/delay-proxy.ts';
import { startWranglerDev, type WranglerDev } from '../scripts/worker-dev.ts';
import { setQueuePaused } from '../src/db/sql/tenants.ts';
import { createApiKey } from '../src/tenants/keys.ts';
import { migrateProject, openProjectDb } from './core.ts';
import { processTreeCpu } from './cpu.ts';
import { startPgBouncer } from './pooler.ts';
import { ignoreTerminatedConnections, root, startProxyProcess, startServer } from './server.ts';
import { percentile, progress } from './stats.ts';

const int = (name: string, fallback: number) => {
  const v = Number(process.env[name]);
  return process.env[name] && Number.isInteger(v) && v >= 0 ? v : fallback;
};
const revisions = process.argv.slice(2);
if (revisions.length < 2) {
  console.error('usage: npm run bench:ab -- <rev> <rev> [...]   (`.` is the working tree)');
  process.exit(2);
}
const rttMs = int('BENCH_RTT_MS', 30);
const rounds = int('BENCH_AB_ROUNDS', 6);
const latencyRequests = int('BENCH_AB_LATENCY_REQUESTS', 50);
const throughputRequests = int('BENCH_AB_REQUESTS', 300);
const SOURCES = ['functions', 'src', 'packages', 'wrangler.toml', 'package.json'];

/** The revision's Worker sources in a directory of their own, borrowing node_modules and the dashboard build. */
function exportRevision(rev: string, into: string): void {
  mkdirSync(into, { recursive: true });
  if (rev === '.') {
    for (const s of SOURCES) cpSync(join(root, s), join(into, s), { recursive: true });
  } else {
    const tar = execFileSync('git', ['archive', rev, ...SOURCES], { cwd: root, maxBuffer: 1 << 28 });
    execFileSync('tar', ['-x', '-C', into], { input: tar });
  }
  symlinkSync(join(root, 'node_modules'), join(into, 'node_modules'));
  mkdirSync(join(into, 'dashboard'));
  symlinkSync(join(root, 'dashboard/dist'), join(into, 'dashboard/dist'));
}

/** The repository's wrangler.toml of that directory plus the HYPERDRIVE binding, its paths absolute. */
function configFor(dir: string): string {
  const base = readFileSync(join(dir, 'wrangler.toml'), 'utf8')
    .replace(/^main = "([^"]+)"/m, (_, main: string) => `main = ${JSON.stringify(join(dir, main))}`)
    .replace(/^directory = "\.\/([^"]+)"/m, (_, d: string) => `directory = ${JSON.stringify(join(dir, d))}`);
  return `${base}\n[[hyperdrive]]\nbinding = "HYPERDRIVE"\nid = "bench-ab"\n`;
}

ignoreTerminatedConnections();
await ensureDashboardBuilt();
const scratch = mkdtempSync(join(tmpdir(), 'scheduler-bench-ab-'));
const server = await startServer(process.env.DATABASE_URL);
const proxy = await startProxyProcess();
const workers: { rev: string; w: WranglerDev }[] = [];
let stopDelay = async () => {};
let stopPooler = async () => {};
try {
  const databaseUrl = await server.freshDatabase('bench_ab');
  await migrateProject(databaseUrl, proxy.address);
  const setup = await openProjectDb(databaseUrl, proxy.address);
  await setQueuePaused(setup, { queue: 'default', paused: true }); // as the transport phase: the kick claims nothing
  const keys: string[] = [];
  for (let i = 0; i < 10; i++) keys.push((await createApiKey(setup, `tenant-${i}`)).key);
  await setup.close();

  const target = new URL(databaseUrl);
  const delay = await startDelayProxy({ target: { host: target.hostname, port: Number(target.port) }, roundTripMs: rttMs });
  stopDelay = () => delay.close();
  const pooler = await startPgBouncer({
    upstream: { host: '127.0.0.1', port: delay.port },
    user: decodeURIComponent(target.username),
    password: decodeURIComponent(target.password),
  });
  if (!pooler) throw new Error('PgBouncer is not installed (apt-get install -y pgbouncer)');
  stopPooler = () => pooler.stop();
  const hyperdriveUrl = new URL(databaseUrl);
  hyperdriveUrl.host = pooler.address;
  hyperdriveUrl.password = 'unused';

  const observability: Record<string, string> = process.env.BENCH_LOCAL_OBSERVABILITY === '1' ? {} : { X_LOCAL_OBSERVABILITY: 'false' };
  for (const [i, rev] of revisions.entries()) {
    const dir = join(scratch, `variant-${i}`);
    exportRevision(rev, dir);
    mkdirSync(join(scratch, `wrangler-${i}`));
    progress(`bench:ab: starting wrangler dev for ${rev}`);
    const w = await startWranglerDev({
      cwd: dir,
      dir: join(scratch, `wrangler-${i}`),
      config: configFor(dir),
      vars: {
        DATABASE_URL: databaseUrl,
        DATABASE_WS_PROXY: proxy.address,
        ADMIN_TOKEN: `adm_${randomBytes(24).toString('base64url')}`,
        SIGNING_SECRET: `whsec_${randomBytes(32).toString('base64')}`,
      },
      env: { ...observability, CLOUDFLARE_HYPERDRIVE_LOCAL_CONNECTION_STRING_HYPERDRIVE: hyperdriveUrl.toString() },
    });
    workers.push({ rev, w });
  }

  const enqueue = async (w: WranglerDev, key: string) => {
    const res = await fetch(`${w.url}/v1/tasks`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ task: 'noop' }),
    });
    const text = await res.text();
    if (res.status !== 201) throw new Error(`POST /v1/tasks: ${res.status} ${text.slice(0, 200)}`);
  };
  const noDb = async (w: WranglerDev) => {
    const res = await fetch(`${w.url}/nodb`);
    await res.arrayBuffer();
    if (res.status !== 404) throw new Error(`GET /nodb: ${res.status}`);
  };
  /** The Worker's workerd: wrangler runs two (its dev proxy's and the Worker's), and the Worker's is the one whose CPU grows with database work; here both are summed. */
  const workerdCpu = (w: WranglerDev) => processTreeCpu(w.pid).workerd ?? NaN;
  const rate = async (w: WranglerDev, call: (i: number) => Promise<void>) => {
    let next = 0;
    const cpu0 = workerdCpu(w);
    const t0 = performance.now();
    await Promise.all(Array.from({ length: 10 }, async () => { while (next < throughputRequests) await call(next++); }));
    const seconds = (performance.now() - t0) / 1000;
    return { rps: throughputRequests / seconds, cpuMs: ((workerdCpu(w) - cpu0) * 1000) / throughputRequests };
  };

  for (const { w } of workers) for (const key of keys) await enqueue(w, key); // warm: isolate, key cache, pool
  type Row = { p50: number[]; samples: number[]; rps: number[]; noDbRps: number[]; cpuMs: number[]; noDbCpuMs: number[] };
  const rows = new Map<string, Row>(revisions.map((r) => [r, { p50: [], samples: [], rps: [], noDbRps: [], cpuMs: [], noDbCpuMs: [] }]));
  for (let round = 0; round < rounds; round++) {
    const order = round % 2 === 0 ? workers : [...workers].reverse();
    for (const { rev, w } of order) {
      const row = rows.get(rev)!;
      const samples: number[] = [];
      for (let i = 0; i < latencyRequests; i++) {
        const t0 = performance.now();
        await enqueue(w, keys[0]!);
        samples.push(performance.now() - t0);
      }
      row.p50.push(percentile(samples, 50));
      row.samples.push(...samples);
      const none = await rate(w, () => noDb(w));
      const one = await rate(w, () => enqueue(w, keys[0]!));
      row.noDbRps.push(none.rps);
      row.noDbCpuMs.push(none.cpuMs);
      row.rps.push(one.rps);
      row.cpuMs.push(one.cpuMs);
    }
    progress(`bench:ab: round ${round + 1} of ${rounds}, load ${loadavg().map((l) => l.toFixed(2)).join(' ')}`);
  }

  const median = (xs: number[]) => percentile(xs, 50);
  const f = (xs: number[], digits = 1) => xs.map((x) => x.toFixed(digits)).join(' ');
  console.log(`${rttMs} ms round trip, ${rounds} rounds; medians over rounds (each round's value in brackets)`);
  for (const rev of revisions) {
    const r = rows.get(rev)!;
    const ratios = r.rps.map((x, i) => x / r.noDbRps[i]!);
    console.log(`${rev}:`);
    console.log(`  enqueue p50 ${median(r.p50).toFixed(1)} ms [${f(r.p50)}], p99 of all ${percentile(r.samples, 99).toFixed(1)} ms`);
    console.log(`  10 concurrent: ${median(r.rps).toFixed(0)}/s vs no-db ${median(r.noDbRps).toFixed(0)}/s, ratio ${median(ratios).toFixed(2)} [${f(ratios, 2)}]`);
    console.log(`  workerd CPU per request: enqueue ${median(r.cpuMs).toFixed(2)} ms [${f(r.cpuMs, 2)}], no-db ${median(r.noDbCpuMs).toFixed(2)} ms`);
  }
  const [first, ...others] = revisions;
  for (const rev of others) {
    const a = rows.get(first!)!;
    const b = rows.get(rev)!;
    const d = a.cpuMs.map((x, i) => b.cpuMs[i]! - x);
    console.log(`${rev} - ${first}: workerd CPU per enqueue ${median(d) >= 0 ? '+' : ''}${median(d).toFixed(3)} ms (median of rounds; lower in ${d.filter((x) => x < 0).length} of ${d.length})`);
  }
  console.log(`load average at end: ${loadavg().map((l) => l.toFixed(2)).join(' ')}`);
} finally {
  for (const { w } of workers) await w.stop().catch(() => {});
  await stopPooler();
  await stopDelay();
  await proxy.stop();
  await server.stop();
  rmSync(scratch, { recursive: true, force: true });
}
