// `npm run bench` (issue 7): this project against pg-boss and graphile-worker
// on one Postgres, each system in fresh databases. Progress on stderr, the
// table on stdout, every figure as JSON in bench/results/latest.json and a
// timestamped copy under bench/results/runs/. BENCHMARKS.md explains the
// method. Never part of `npm test`.
import { spawn } from 'node:child_process';
import { mkdir, writeFile } from 'node:fs/promises';
import { availableParallelism, cpus, loadavg, totalmem } from 'node:os';
import { join } from 'node:path';
import { measureBundle, type BundleSize } from './bundle.ts';
import { metricsScrapeTiming, type MetricsTiming } from './metrics.ts';
import { prepareCeiling, runCeiling, type CeilingRun } from './ceiling.ts';
import type { Ctx } from './context.ts';
import { benchConfig, benchPlans, benchTransport, otherTransport, transportName } from './core.ts';
import { createCpuMeter, postmasterOf } from './cpu.ts';
import { FLOOR_DESIGNS, floorCycle, type FloorDesign, type FloorResult } from './floor.ts';
import { graphileDrain, graphileEnqueue, graphileLatency, graphileSettings } from './graphile.ts';
import type { PeerDrainResult, PeerRate } from './peers.ts';
import { pgbossDrain, pgbossEnqueue, pgbossLatency, pgbossSettings } from './pgboss.ts';
import {
  dueInstants,
  latencySummary,
  projectDrain,
  projectEnqueueBatch,
  DRAIN_FLOWS,
  type DrainFlow,
  projectFairness,
  projectLatency,
  projectStatements,
  projectFencedWrites,
  type FencedResult,
  type DrainResult,
  type FairnessResult,
  type LatencyResult,
  type StepCount,
} from './project.ts';
import { fmt1, fmt2, fmtInt, pairedRatios, range, ratio, renderTable, verdict, x, type Row } from './report.ts';
import { ignoreTerminatedConnections, root, startProxyProcess, startServer, withClient } from './server.ts';
import { readSettings, type Settings, type SystemName } from './settings.ts';
import { progress, repeat, summarize, type Summary } from './stats.ts';
import { runModel, type ModelResult } from './model.ts';
import { runTransport, type RouteTrips, type TransportResult } from './transport.ts';
import { httpEnqueue, startWorkerDev, type HttpRate } from './worker-http.ts';

ignoreTerminatedConnections();
const settings = readSettings();
const began = Date.now();
const has = (s: SystemName) => settings.systems.includes(s);
const phase = (p: Settings['phases'][number]) => settings.phases.includes(p);

interface Results {
  startedAt: string;
  durationSeconds?: number;
  machine: Record<string, unknown>;
  settings: Record<string, unknown>;
  peerSettings: Record<string, unknown>;
  figures: Record<string, unknown>;
  errors: Record<string, string>;
  table?: string;
}

const results: Results = {
  startedAt: new Date(began).toISOString(),
  machine: {
    cores: availableParallelism(),
    cpu: cpus()[0]?.model ?? 'unknown',
    memoryGiB: Math.round(totalmem() / 2 ** 30),
    node: process.version,
    platform: `${process.platform} ${process.arch}`,
    loadAverageAtStart: loadavg().map((l) => Number(l.toFixed(2))),
  },
  settings: { ...settings, databaseUrl: settings.databaseUrl ? '(DATABASE_URL)' : '(embedded)' },
  peerSettings: { 'pg-boss': pgbossSettings(settings), 'graphile-worker': graphileSettings(settings) },
  figures: {},
  errors: {},
};
const F = results.figures as Record<string, unknown>;

/** Runs one part; a failure is recorded and the bench goes on. */
async function attempt(key: string, fn: () => Promise<void>): Promise<void> {
  try {
    await fn();
  } catch (error) {
    const message = error instanceof Error ? error.message : String(error);
    results.errors[key] = message;
    progress(`${key}: FAILED: ${message}`);
  }
}

const rates = (runs: { rate: number }[]) => summarize(runs.map((r) => r.rate));
const describeDrain = (r: DrainResult | PeerDrainResult) =>
  `${fmtInt(r.rate)} tasks/s` + ('deadlocks' in r && (r.deadlocks > 0 || r.retriedMessages > 0) ? ` (${r.deadlocks} deadlocks, ${r.retriedMessages} messages redelivered after 10 s)` : '');
/** "2 of 3 runs hit deadlocks" for the project's drain cells. */
function deadlockNote(key: string): string {
  const runs = (F[key] as { runs?: DrainResult[] } | undefined)?.runs ?? [];
  const hit = runs.filter((r) => r.deadlocks > 0);
  if (hit.length === 0) return '';
  const total = hit.reduce((a, r) => a + r.deadlocks, 0);
  return `; ${hit.length} of ${runs.length} runs hit deadlocks (${total} in all)`;
}

progress(`machine: ${results.machine.cores} cores (${results.machine.cpu}), Node ${process.version}, load ${loadavg().map((l) => l.toFixed(2)).join(' ')}`);
progress(`sizes: ${settings.tasks} tasks, batches of ${settings.batchSize}, ${settings.reps} repetitions; systems ${settings.systems.join(', ')}`);
progress(`pg-boss work: ${JSON.stringify(pgbossSettings(settings).work)}; graphile-worker: ${JSON.stringify(graphileSettings(settings).worker)}`);
progress(`this project's drain: ${settings.sweepers} sweep loops, ${settings.consumers} consumers, batches of ${settings.queueBatch}`);

const server = await startServer(settings.databaseUrl);
results.machine.postgres = `${server.version}${server.embedded ? ' (embedded)' : ' (DATABASE_URL)'}`;
progress(`postgres ${results.machine.postgres}`);
const proxy = await startProxyProcess();
// Ctrl-C: stop Postgres and the children, then leave ('exit' handlers take the rest).
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => {
    progress(`${signal}: stopping`);
    const timer = setTimeout(() => process.exit(130), 10_000);
    void Promise.allSettled([proxy.stop(), server.stop()]).then(() => {
      clearTimeout(timer);
      process.exit(130);
    });
  });
}
// Read while the backend lives: its parent is the server's postmaster.
const postmaster = await withClient(server.url, async (c) => postmasterOf((await c.query<{ pid: number }>('select pg_backend_pid() as pid')).rows[0]!.pid));
const ctx: Ctx = { server, proxy: proxy.address, settings, cpu: createCpuMeter(server.url, proxy.pid, postmaster) };

try {
  // 1. Enqueue -------------------------------------------------------------
  if (phase('enqueue')) {
    if (has('project')) {
      await attempt('enqueue.project.batch', async () => {
        const runs = await repeat('enqueue batch (core enqueueTasks): project', settings.reps, () => projectEnqueueBatch(ctx), (r) => `${fmtInt(r.rate)} tasks/s`);
        F['enqueue.project.batch'] = { rate: rates(runs), runs };
        const other = await repeat(`enqueue batch (core enqueueTasks) over ${transportName(otherTransport)}: project`, settings.reps, () => projectEnqueueBatch(ctx, otherTransport), (r) => `${fmtInt(r.rate)} tasks/s`);
        F['enqueue.project.batchOther'] = { rate: rates(other), runs: other };
      });
      await attempt('enqueue.project.http', async () => {
        progress('starting wrangler dev against the bench database');
        const w = await startWorkerDev(ctx);
        try {
          const single = await repeat(
            `enqueue one at a time over HTTP (c=${settings.singleConcurrency}): project`,
            settings.reps,
            (rep) => httpEnqueue(ctx, w, 'single', rep === 0 ? Math.min(100, settings.httpSingleTasks) : undefined),
            (r: HttpRate) => `${fmt1(r.rate)} tasks/s`,
          );
          F['enqueue.project.httpSingle'] = { rate: rates(single), runs: single };
          const batch = await repeat('enqueue batch over HTTP (POST /v1/tasks/batch): project', settings.reps, () => httpEnqueue(ctx, w, 'batch'), (r: HttpRate) => `${fmtInt(r.rate)} tasks/s`);
          F['enqueue.project.httpBatch'] = { rate: rates(batch), runs: batch };
        } finally {
          await w.stop();
        }
      });
    }
    const peers: [SystemName, (mode: 'single' | 'batch', count?: number) => Promise<PeerRate>][] = [
      ['pg-boss', (m, c) => pgbossEnqueue(ctx, m, c)],
      ['graphile-worker', (m, c) => graphileEnqueue(ctx, m, c)],
    ];
    for (const [name, enqueue] of peers) {
      if (!has(name)) continue;
      await attempt(`enqueue.${name}`, async () => {
        const single = await repeat(
          `enqueue one at a time (c=${settings.singleConcurrency}): ${name}`,
          settings.reps,
          (rep) => enqueue('single', rep === 0 ? Math.min(1000, settings.singleTasks) : undefined),
          (r) => `${fmtInt(r.rate)} tasks/s`,
        );
        const batch = await repeat(`enqueue batch: ${name}`, settings.reps, () => enqueue('batch'), (r) => `${fmtInt(r.rate)} tasks/s`);
        F[`enqueue.${name}`] = { single: rates(single), batch: rates(batch), singleRuns: single, batchRuns: batch };
      });
    }
  }

  await server.dropCreated();

  // 2. Drain ---------------------------------------------------------------
  const drains: [SystemName, (rows: number) => Promise<DrainResult | PeerDrainResult>][] = [
    ['project', (rows) => projectDrain(ctx, rows)],
    ['pg-boss', (rows) => pgbossDrain(ctx, rows)],
    ['graphile-worker', () => graphileDrain(ctx)],
  ];
  if (phase('drain')) {
    for (const [name, drain] of drains) {
      if (!has(name)) continue;
      await attempt(`drain.${name}`, async () => {
        const runs = await repeat(`drain ${settings.tasks}: ${name}`, settings.reps, () => drain(0), describeDrain);
        F[`drain.${name}`] = { rate: rates(runs), runs };
      });
    }
  }

  await server.dropCreated();

  // 2c. Flow control on every task of the drain (issue 16): plain, keyed and
  // rate-limited drains in turn within each repetition, so a load change on
  // the shared machine hits all three alike.
  if (phase('flow') && has('project')) {
    await attempt('flow.project', async () => {
      const flows = (process.env.BENCH_FLOWS ?? DRAIN_FLOWS.join(',')).split(',') as DrainFlow[];
      const runs = Object.fromEntries(DRAIN_FLOWS.map((f) => [f, [] as DrainResult[]])) as Record<DrainFlow, DrainResult[]>;
      for (let rep = 0; rep <= settings.reps; rep++) {
        for (const flow of flows) {
          const r = await projectDrain(ctx, 0, flow);
          progress(`flow drain ${settings.tasks} ${flow}: ${rep === 0 ? 'warm-up' : `rep ${rep}/${settings.reps}`}: ${describeDrain(r)}`);
          if (rep > 0) runs[flow].push(r);
          await server.dropCreated();
        }
      }
      F['flow.project'] = Object.fromEntries(flows.map((f) => [f, { rate: rates(runs[f]), runs: runs[f] }]));
      progress(`flow: ${flows.map((f) => `${f} ${fmtInt(rates(runs[f]).median)}`).join(', ')} tasks/s (medians)`);
    });
  }

  // 2d. The floor of the drain's row work (issue 12): bare designs, designs
  // interleaved within each repetition.
  if (phase('floor')) {
    await attempt('floor', async () => {
      const designs = Object.keys(FLOOR_DESIGNS) as FloorDesign[];
      const runs = Object.fromEntries(designs.map((d) => [d, [] as FloorResult[]])) as Record<FloorDesign, FloorResult[]>;
      for (let rep = 0; rep <= settings.reps; rep++) {
        for (const d of designs) {
          const r = await floorCycle(ctx, d);
          progress(`floor ${settings.tasks} ${d}: ${rep === 0 ? 'warm-up' : `rep ${rep}/${settings.reps}`}: enqueue ${fmtInt(r.enqueueRate)} tasks/s; drain ${fmtInt(r.cpuUs)} µs CPU, ${fmtInt(r.walBytes)} B WAL per task`);
          if (rep > 0) runs[d].push(r);
        }
        await server.dropCreated();
      }
      const of = (d: FloorDesign, f: (r: FloorResult) => number) => summarize(runs[d].map(f));
      F.floor = Object.fromEntries(
        designs.map((d) => [
          d,
          {
            enqueueRate: of(d, (r) => r.enqueueRate),
            enqueueCpuUs: of(d, (r) => r.enqueueCpuUs),
            cpuUs: of(d, (r) => r.cpuUs),
            walBytes: of(d, (r) => r.walBytes),
            versions: of(d, (r) => r.versions),
            hot: of(d, (r) => r.hotRatio),
            runs: runs[d],
          },
        ]),
      );
    });
  }

  // 3. Due-to-start latency --------------------------------------------------
  if (phase('latency')) {
    const warm: Settings = { ...settings, latencyTasks: 50, latencySpreadMs: 2000, latencyLeadMs: 1000 };
    const lat: [SystemName, (c: Ctx) => Promise<LatencyResult>][] = [
      ['project', (c) => projectLatency(c)],
      ['pg-boss', async (c) => latencySummary(await pgbossLatency(c, () => dueInstants(c.settings)))],
      ['graphile-worker', async (c) => latencySummary(await graphileLatency(c, () => dueInstants(c.settings)))],
    ];
    for (const [name, run] of lat) {
      if (!has(name)) continue;
      await attempt(`latency.${name}`, async () => {
        const runs = await repeat(
          `due-to-start latency, ${settings.latencyTasks} tasks over ${settings.latencySpreadMs / 1000} s: ${name}`,
          settings.reps,
          (rep) => run(rep === 0 ? { ...ctx, settings: warm } : ctx),
          (r) => `p50 ${fmt1(r.p50)} p95 ${fmt1(r.p95)} p99 ${fmt1(r.p99)} ms`,
        );
        F[`latency.${name}`] = {
          p50: summarize(runs.map((r) => r.p50)),
          p95: summarize(runs.map((r) => r.p95)),
          p99: summarize(runs.map((r) => r.p99)),
          runs,
        };
      });
    }
  }

  await server.dropCreated();

  // 4. Drain over 1M finished rows --------------------------------------------
  if (phase('drain-1m')) {
    for (const [name, drain] of drains) {
      if (!has(name) || name === 'graphile-worker' || (name === 'pg-boss' && !settings.peers1m)) continue;
      await attempt(`drain1m.${name}`, async () => {
        // The empty-table drain above already warmed these code paths; seeding a
        // million rows again only to warm up would cost a minute.
        const runs = await repeat(
          `drain ${settings.tasks} over ${fmtInt(settings.finishedRows)} finished rows: ${name}`,
          settings.reps,
          () => drain(settings.finishedRows),
          describeDrain,
          { warmup: !phase('drain') },
        );
        F[`drain1m.${name}`] = { rate: rates(runs), runs };
      });
    }
  }

  await server.dropCreated();

  // 5. Statements per 100 tasks --------------------------------------------------
  if (phase('statements') && has('project')) {
    await attempt('statements.project', async () => {
      const runs = await repeat('statements per 100 tasks: project', settings.reps, () => projectStatements(ctx), (r) => `${fmt2(r.total.per100.statements)} statements, ${fmt2(r.total.per100.roundTrips)} round trips per 100`, { warmup: false });
      F['statements.project'] = runs[0];
      F['statements.project.identical'] = runs.every((r) => JSON.stringify(r) === JSON.stringify(runs[0]));
    });
  }

  // 5b. Fenced writes with many tasks running -------------------------------------
  if (phase('fenced') && has('project')) {
    await attempt('fenced.project', async () => {
      const describe = (r: FencedResult) => `start ${fmt2(r.startMs)} ms + finish ${fmt2(r.finishMs)} ms per 100 with ${fmtInt(r.running)} running`;
      const none = await repeat('fenced start+finish of 100, none running: project', settings.reps, () => projectFencedWrites(ctx, 0), describe);
      const many = await repeat(`fenced start+finish of 100, ${fmtInt(settings.fencedRunning)} running: project`, settings.reps, () => projectFencedWrites(ctx, settings.fencedRunning), describe);
      F['fenced.project'] = {
        none: { totalMs: summarize(none.map((r) => r.totalMs)), runs: none },
        many: { totalMs: summarize(many.map((r) => r.totalMs)), runs: many },
      };
    });
    await server.dropCreated();
  }

  // 6. Fairness ------------------------------------------------------------------
  if (phase('fairness') && has('project')) {
    await attempt('fairness.project', async () => {
      const runs = await repeat('fairness 1:3:1: project', settings.reps, () => projectFairness(ctx), (r) => `max share error ${fmt2(r.maxErrorPoints)} points, small tenant gap p99 ${r.late.gapP99}`, { warmup: false });
      F['fairness.project'] = { maxErrorPoints: summarize(runs.map((r) => r.maxErrorPoints)), gapP99: summarize(runs.map((r) => r.late.gapP99)), firstClaimAfter: summarize(runs.map((r) => r.late.firstClaimAfter)), runs };
    });
  }

  await server.dropCreated();

  // 7. The physical ceiling -------------------------------------------------------
  if (phase('ceiling')) {
    await attempt('ceiling', async () => {
      const url = await prepareCeiling(ctx);
      const fig: Record<string, unknown> = {};
      for (const kind of ['single', 'batch100', 'connect'] as const) {
        const secs = kind === 'connect' ? Math.min(5, settings.pgbenchSeconds) : settings.pgbenchSeconds;
        const runs = await repeat(`pgbench ${kind} (${settings.cores} clients, ${secs} s)`, settings.reps, () => runCeiling(ctx, url, kind, secs), (r: CeilingRun) => `${fmtInt(r.tps)} tps`, { warmup: kind !== 'connect' });
        fig[kind] = { tps: summarize(runs.map((r) => r.tps)), rowsPerSecond: summarize(runs.map((r) => r.rowsPerSecond)), connectMs: summarize(runs.map((r) => r.connectMs ?? NaN)), runs };
      }
      F.ceiling = fig;
    });
  }

  await server.dropCreated();

  // 9. /metrics over a million finished rows ------------------------------------
  if (phase('metrics') && has('project')) {
    await attempt('metrics', async () => {
      const empty = await metricsScrapeTiming(ctx, 0);
      progress(`metrics, no history: scrape p50 ${fmt1(empty.scrapeP50Ms)} ms, charts p50 ${fmt1(empty.chartsP50Ms)} ms, naive count ${fmt1(empty.naiveCountMs)} ms`);
      const full = await metricsScrapeTiming(ctx, settings.finishedRows);
      progress(`metrics, ${fmtInt(settings.finishedRows)} finished rows: scrape p50 ${fmt1(full.scrapeP50Ms)} ms, charts p50 ${fmt1(full.chartsP50Ms)} ms, naive count ${fmt1(full.naiveCountMs)} ms`);
      F.metrics = { empty, full };
    });
    await server.dropCreated();
  }

  // 8. Bundle and memory -------------------------------------------------------------
  if (phase('bundle') && has('project')) {
    await attempt('bundle', async () => {
      progress('bundle: wrangler deploy --dry-run');
      const b = await measureBundle();
      F.bundle = b;
      progress(`bundle: ${fmtInt(b.rawBytes / 1024)} KiB raw, ${fmtInt(b.gzipBytes / 1024)} KiB gzip (wrangler: ${b.wranglerReported})`);
      progress(`dashboard assets: ${fmtInt(b.dashboard.rawBytes / 1024)} KiB raw, ${fmtInt(b.dashboard.gzipBytes / 1024)} KiB gzip in ${b.dashboard.files.length} files`);
    });
  }
  if (phase('memory') && has('project')) {
    await attempt('memory', async () => {
      progress('memory per batch: child process with --expose-gc');
      const url = await server.freshDatabase('bench_project_memory');
      const { migrateProject } = await import('./core.ts');
      await migrateProject(url, proxy.address);
      const out = await new Promise<string>((resolve, reject) => {
        const child = spawn(process.execPath, ['--expose-gc', '--max-semi-space-size=64', join(root, 'bench/memory.ts'), url, proxy.address], { cwd: root, stdio: ['ignore', 'pipe', 'inherit'] });
        let text = '';
        child.stdout.on('data', (d: Buffer) => (text += d.toString()));
        child.once('error', reject);
        child.once('exit', (code) => (code === 0 ? resolve(text) : reject(new Error(`memory.ts exited ${code}`))));
      });
      F.memory = JSON.parse(out.trim().split('\n').at(-1)!);
    });
  }
  if (phase('transport') && has('project')) {
    await attempt('transport', async () => {
      F.transport = await runTransport(ctx);
    });
  }
  if (phase('model') && has('project')) {
    await attempt('model', async () => {
      F.model = await runModel(ctx);
    });
  }
} finally {
  await proxy.stop();
  await server.stop();
}

// The table ----------------------------------------------------------------------
type Rated = { rate: Summary; runs?: { rate: number }[] };
const get = <T>(k: string) => F[k] as T | undefined;
const rows: Row[] = [];
const pe = get<{ single: Summary; batch: Summary }>('enqueue.pg-boss');
const ge = get<{ single: Summary; batch: Summary }>('enqueue.graphile-worker');
const httpSingle = get<Rated>('enqueue.project.httpSingle');
const coreBatch = get<Rated>('enqueue.project.batch');
const httpBatch = get<Rated>('enqueue.project.httpBatch');
const coreOther = get<Rated>('enqueue.project.batchOther');
if (phase('enqueue')) {
  const vsPb = ratio(httpSingle?.rate, pe?.single);
  const vsGw = ratio(httpSingle?.rate, ge?.single);
  rows.push({
    workload: `1. enqueue one at a time, c=${settings.singleConcurrency} (tasks/s)`,
    project: `${range(httpSingle?.rate, fmt1)} HTTP`,
    pgboss: range(pe?.single),
    graphile: range(ge?.single),
    target: `>= 1x each peer (${x(vsPb)} pg-boss, ${x(vsGw)} graphile)`,
    verdict: verdict(vsPb === undefined || vsGw === undefined ? undefined : vsPb >= 1 && vsGw >= 1),
  });
  const vsGwBatch = ratio(coreBatch?.rate, ge?.batch);
  rows.push({
    workload: `1. enqueue in batches of ${settings.batchSize} (tasks/s)`,
    project: `${range(coreBatch?.rate)} core; ${range(coreOther?.rate)} core over ${transportName(otherTransport)}; ${range(httpBatch?.rate)} HTTP`,
    pgboss: range(pe?.batch),
    graphile: range(ge?.batch),
    // Issue 12: the core batch enqueue at 1.2x graphile-worker's addJobs.
    target: `core >= 1.2x graphile addJobs (${x(vsGwBatch)}; over ${transportName(otherTransport)} ${x(ratio(coreOther?.rate, ge?.batch))})`,
    verdict: verdict(vsGwBatch === undefined ? undefined : vsGwBatch >= 1.2),
  });
}
const pd = get<Rated>('drain.project');
const bd = get<Rated>('drain.pg-boss');
const gd = get<Rated>('drain.graphile-worker');
if (phase('drain')) {
  const vsG = ratio(pd?.rate, gd?.rate);
  const vsB = ratio(pd?.rate, bd?.rate);
  rows.push({
    workload: `2. drain ${fmtInt(settings.tasks)} no-op tasks (tasks/s)`,
    project: range(pd?.rate) + deadlockNote('drain.project'),
    pgboss: range(bd?.rate),
    graphile: range(gd?.rate),
    target: `>= 1.5x graphile (${x(vsG)}), >= 2x pg-boss (${x(vsB)})`,
    verdict: verdict(vsG === undefined || vsB === undefined ? undefined : vsG >= 1.5 && vsB >= 2),
  });
}
// A drain's figures per task, from Postgres itself: CPU of its processes, WAL,
// and the row versions written to the system's tables (updates: the share of
// them HOT). Medians over the repetitions.
const perTask = (key: string) => {
  const runs = (F[key] as { runs?: (DrainResult | PeerDrainResult)[] } | undefined)?.runs ?? [];
  if (runs.length === 0) return undefined;
  const per = (f: (r: DrainResult | PeerDrainResult) => number) => summarize(runs.map((r) => f(r) / r.tasks)).median;
  const sum = (r: DrainResult | PeerDrainResult, f: (t: { inserted: number; updated: number; hotUpdated: number; deleted: number }) => number) =>
    Object.values(r.pg.tables).reduce((a, t) => a + f(t), 0);
  return {
    cpuUs: per((r) => r.cpu.postgres * 1e6),
    walBytes: per((r) => r.pg.walBytes),
    versions: per((r) => sum(r, (t) => t.inserted + t.updated)),
    updates: per((r) => sum(r, (t) => t.updated)),
    hot: summarize(runs.map((r) => sum(r, (t) => t.hotUpdated) / Math.max(1, sum(r, (t) => t.updated)))).median,
  };
};
if (phase('drain')) {
  const cell = (key: string) => {
    const p = perTask(key);
    return p
      ? `${fmtInt(p.cpuUs)} µs CPU, ${fmtInt(p.walBytes)} B WAL, ${fmt2(p.versions)} row versions (${fmt2(p.updates)} updates, ${fmtInt(p.hot * 100)}% HOT)`
      : 'n/a';
  };
  const pp = perTask('drain.project');
  const gp = perTask('drain.graphile-worker');
  const cpuR = pp && gp ? pp.cpuUs / gp.cpuUs : undefined;
  const walR = pp && gp ? pp.walBytes / gp.walBytes : undefined;
  rows.push({
    workload: '2b. per task in the drain: Postgres CPU, WAL, row versions (inserts + updates)',
    project: cell('drain.project'),
    pgboss: cell('drain.pg-boss'),
    graphile: cell('drain.graphile-worker'),
    target: `CPU <= 1x graphile (${x(cpuR)}), WAL <= 1.5x (${x(walR)})`,
    verdict: verdict(cpuR === undefined || walR === undefined ? undefined : cpuR <= 1 && walR <= 1.5),
  });
}
if (phase('floor')) {
  // Each bare design beside graphile-worker's drain (its CPU and WAL per
  // task) and its addJobs in this run, when those phases ran.
  type FloorFigures = Record<FloorDesign, Record<'enqueueRate' | 'enqueueCpuUs' | 'cpuUs' | 'walBytes' | 'versions' | 'hot', Summary>>;
  const floor = get<FloorFigures>('floor');
  const g = perTask('drain.graphile-worker');
  for (const d of Object.keys(FLOOR_DESIGNS) as FloorDesign[]) {
    const f = floor?.[d];
    const vsDrain = f && g ? `drain vs graphile's: CPU ${x(f.cpuUs.median / g.cpuUs)}, WAL ${x(f.walBytes.median / g.walBytes)}` : '';
    const vsAdd = f && ge ? `enqueue ${x(f.enqueueRate.median / ge.batch.median)} addJobs` : '';
    rows.push({
      workload: `2d. floor: ${d} (bare statements)`,
      project: f
        ? `enqueue ${fmtInt(f.enqueueRate.median)} tasks/s (${fmtInt(f.enqueueCpuUs.median)} µs CPU per task); drain ${fmtInt(f.cpuUs.median)} µs CPU, ${fmtInt(f.walBytes.median)} B WAL, ${fmt2(f.versions.median)} row versions (${fmtInt(f.hot.median * 100)}% of updates HOT) per task`
        : 'n/a',
      pgboss: '',
      graphile: '',
      target: [vsDrain, vsAdd].filter(Boolean).join('; ') || 'reported',
      verdict: '',
    });
  }
}
if (phase('latency')) {
  const L = (k: string) => get<{ p50: Summary; p95: Summary; p99: Summary }>(`latency.${k}`);
  const cell = (k: string) => {
    const l = L(k);
    return l ? `p50 ${range(l.p50)} / p95 ${range(l.p95)} / p99 ${range(l.p99)}` : 'n/a';
  };
  const r = ratio(L('project')?.p99, L('graphile-worker')?.p99);
  rows.push({
    workload: `3. due-to-start latency, ${settings.latencyTasks} tasks over ${settings.latencySpreadMs / 1000} s (ms)`,
    project: cell('project'),
    pgboss: cell('pg-boss'),
    graphile: cell('graphile-worker'),
    target: `p99 <= 0.5x graphile (${x(r)})`,
    verdict: verdict(r === undefined ? undefined : r <= 0.5),
  });
}
if (phase('drain-1m')) {
  const p1 = get<Rated>('drain1m.project');
  const b1 = get<Rated>('drain1m.pg-boss');
  const r = ratio(p1?.rate, pd?.rate);
  const rb = ratio(b1?.rate, bd?.rate);
  rows.push({
    workload: `4. drain with ${fmtInt(settings.finishedRows)} finished rows (tasks/s; vs empty)`,
    project: `${range(p1?.rate)} (${x(r)})${deadlockNote('drain1m.project')}`,
    pgboss: b1 ? `${range(b1.rate)} (${x(rb)})` : 'not run',
    graphile: 'n/a (deletes completed jobs)',
    target: `>= 0.83x empty (${x(r)})`,
    verdict: verdict(r === undefined ? undefined : r >= 0.83),
  });
}
const flow = get<Partial<Record<DrainFlow, Rated>>>('flow.project');
if (phase('flow')) {
  const keyed = ratio(flow?.keyed?.rate, flow?.plain?.rate);
  const rated = ratio(flow?.rated?.rate, flow?.plain?.rate);
  const rated1 = ratio(flow?.rated1?.rate, flow?.plain?.rate);
  // Beside the ratio of the medians (the verdict's), each repetition's pair.
  const paired = (f: DrainFlow) => {
    const p = pairedRatios(flow?.[f]?.runs, flow?.plain?.runs);
    return p ? `; per repetition ${range(p, (n) => `${fmt2(n)}x`)}` : '';
  };
  rows.push({
    workload: `2c. drain ${fmtInt(settings.tasks)} with flow control on every task (tasks/s): plain; one concurrency key (limit 1,000); rate limits that never bind (4 keys of 10,000/s); one key of 10,000/s`,
    project: flow
      ? `${range(flow.plain?.rate)}; keyed ${range(flow.keyed?.rate)} (${x(keyed)}${paired('keyed')}); rated ${range(flow.rated?.rate)} (${x(rated)}${paired('rated')}); one rated key ${range(flow.rated1?.rate)} (${x(rated1)}${paired('rated1')})`
      : 'n/a',
    pgboss: '',
    graphile: '',
    target: '>= 0.8x plain, each',
    verdict: verdict(keyed === undefined || rated === undefined ? undefined : keyed >= 0.8 && rated >= 0.8),
  });
}
const st = get<{ enqueue: StepCount; sweep: StepCount; consume: StepCount; total: StepCount }>('statements.project');
if (phase('statements')) {
  rows.push({
    workload: '5. statements (round trips) per 100 tasks',
    project: st
      ? `enqueue ${fmt2(st.enqueue.per100.statements)} (${fmt2(st.enqueue.per100.roundTrips)}), sweep ${fmt2(st.sweep.per100.statements)} (${fmt2(st.sweep.per100.roundTrips)}), consume ${fmt2(st.consume.per100.statements)} (${fmt2(st.consume.per100.roundTrips)}); total ${fmt2(st.total.per100.statements)} (${fmt2(st.total.per100.roundTrips)})`
      : 'n/a',
    pgboss: '',
    graphile: '',
    target: '<= 5 end to end',
    verdict: verdict(st ? st.total.per100.statements <= 5 : undefined),
  });
}
const fenced = get<{ none: { totalMs: Summary }; many: { totalMs: Summary } }>('fenced.project');
if (phase('fenced')) {
  const r = ratio(fenced?.many.totalMs, fenced?.none.totalMs);
  rows.push({
    workload: `5b. fenced start + finish of 100 (ms) with ${fmtInt(settings.fencedRunning)} running vs none`,
    project: fenced ? `${range(fenced.many.totalMs, fmt2)} vs ${range(fenced.none.totalMs, fmt2)} (${x(r)})` : 'n/a',
    pgboss: '',
    graphile: '',
    target: '<= 1.5x none',
    verdict: verdict(r === undefined ? undefined : r <= 1.5),
  });
}
const fair = get<{ maxErrorPoints: Summary; gapP99: Summary; firstClaimAfter: Summary; runs: FairnessResult[] }>('fairness.project');
if (phase('fairness')) {
  const f0 = fair?.runs[0];
  rows.push({
    workload: '6. fairness, weights 1:3:1 under a shared backlog',
    project: f0
      ? `shares ${Object.entries(f0.share).map(([t, v]) => `${t} ${fmt1(v * 100)}%`).join(', ')} over ${f0.window} claims; max error ${fmt2(fair!.maxErrorPoints.median)} points; late small tenant: first claim after ${range(fair!.firstClaimAfter)} claims, p99 gap ${range(fair!.gapP99)} claims (ideal ${f0.late.idealGap})`
      : 'n/a',
    pgboss: '',
    graphile: '',
    target: 'reported',
    verdict: '',
  });
}
const ceil = get<Record<'single' | 'batch100' | 'connect', { tps: Summary; rowsPerSecond: Summary; connectMs: Summary }>>('ceiling');
if (phase('ceiling')) {
  const frac = (d: Rated | undefined) => (ceil && d ? `${fmt2(d.rate.median / ceil.single.tps.median)}x single-row TPS, ${fmt1((100 * d.rate.median) / ceil.batch100.rowsPerSecond.median)}% of 100-row rows/s` : 'n/a');
  rows.push({
    workload: `7. ceiling (pgbench, ${settings.cores} clients)`,
    project: ceil
      ? `single-row UPDATE ${range(ceil.single.tps)} tps; 100-row UPDATE ${range(ceil.batch100.rowsPerSecond)} rows/s; new connections ${range(ceil.connect.tps)}/s (${fmt1(ceil.connect.connectMs.median)} ms each)`
      : 'n/a',
    pgboss: '',
    graphile: '',
    target: 'drain as a fraction',
    verdict: '',
  });
  rows.push({
    workload: '7. drain as a fraction of the ceiling',
    project: frac(pd),
    pgboss: frac(bd),
    graphile: frac(gd),
    target: 'reported',
    verdict: '',
  });
}
const bundle = get<BundleSize>('bundle');
if (phase('bundle')) {
  rows.push({
    workload: '8. Worker bundle (wrangler deploy --dry-run)',
    project: bundle ? `${fmtInt(bundle.rawBytes / 1000)} KB raw, ${fmtInt(bundle.gzipBytes / 1000)} KB gzip` : 'n/a',
    pgboss: '',
    graphile: '',
    target: '<= 400 KB gzip',
    verdict: verdict(bundle ? bundle.gzipBytes <= 400_000 : undefined),
  });
  rows.push({
    workload: '8b. Dashboard assets (served beside the Worker)',
    project: bundle?.dashboard ? `${fmtInt(bundle.dashboard.rawBytes / 1000)} KB raw, ${fmtInt(bundle.dashboard.gzipBytes / 1000)} KB gzip` : 'n/a',
    pgboss: '',
    graphile: '',
    target: 'reported',
    verdict: '',
  });
}
const met = get<{ empty: MetricsTiming; full: MetricsTiming }>('metrics');
if (phase('metrics')) {
  const r = met ? met.full.scrapeP50Ms / met.empty.scrapeP50Ms : undefined;
  rows.push({
    workload: `9. GET /metrics with ${fmtInt(settings.finishedRows)} finished rows (p50 ms; vs none)`,
    project: met
      ? `${fmt1(met.full.scrapeP50Ms)} ms (${x(r)}); charts ${fmt1(met.full.chartsP50Ms)} ms; a naive count ${fmt1(met.full.naiveCountMs)} ms`
      : 'n/a',
    pgboss: '',
    graphile: '',
    target: '<= 2x the empty table',
    verdict: verdict(r === undefined ? undefined : r <= 2),
  });
}
const mem = get<{ sweep: { allocatedBytes: Summary; retainedBytes: Summary }; consume: { allocatedBytes: Summary; retainedBytes: Summary }; }>('memory');
if (phase('memory')) {
  const kb = (n: number) => fmtInt(n / 1000);
  rows.push({
    workload: '8. heap per batch of 100 (allocated / retained, KB)',
    project: mem
      ? `sweep ${range(mem.sweep.allocatedBytes, kb)} / ${range(mem.sweep.retainedBytes, kb)}; consumeBatch ${range(mem.consume.allocatedBytes, kb)} / ${range(mem.consume.retainedBytes, kb)}`
      : 'n/a',
    pgboss: '',
    graphile: '',
    target: 'reported',
    verdict: '',
  });
}

const tr = get<TransportResult>('transport');
if (phase('transport') && tr && !tr.skipped) {
  const trips = (r: Record<string, RouteTrips>) =>
    (['neon', 'hyperdrive'] as const).map((t) => `${t} ${r[t] ? `${r[t]!.statements}+${r[t]!.connects}c` : 'n/a'}`).join(', ');
  for (const [route, r] of Object.entries(tr.roundTrips)) {
    rows.push({ workload: `9. round trips ${route} (statements + connections)`, project: trips(r), pgboss: '', graphile: '', target: 'enqueue/get/cancel: 1', verdict: '' });
  }
  const lat = (t: 'neon' | 'hyperdrive') => (tr.latency[t] ? `p50 ${fmt1(tr.latency[t].p50)} ms, p99 ${fmt1(tr.latency[t].p99)} ms` : 'n/a');
  rows.push({
    workload: `9. enqueue latency, ${tr.roundTripMs} ms RTT to the database (wrangler dev)`,
    project: `WebSocket: ${lat('neon')}; Hyperdrive stand-in: ${lat('hyperdrive')}`,
    pgboss: '',
    graphile: '',
    target: `Hyperdrive p50 <= ${tr.roundTripMs + 15} ms`,
    verdict: verdict(tr.latency.hyperdrive ? tr.latency.hyperdrive.p50 <= tr.roundTripMs + 15 : undefined),
  });
  const thr = (t: 'neon' | 'hyperdrive') =>
    tr.throughput[t]
      ? `${fmt2(tr.throughput[t].oneTenantRatio)}x / ${fmt2(tr.throughput[t].tenTenantsRatio)}x (${fmtInt(tr.throughput[t].oneTenantRps)} / ${fmtInt(tr.throughput[t].tenTenantsRps)} vs ${fmtInt(tr.throughput[t].noDbRps)}/s)`
      : 'n/a';
  rows.push({
    workload: '9. single enqueue at 10 concurrent vs no-db route (1 tenant / 10 tenants)',
    project: `WebSocket: ${thr('neon')}; Hyperdrive stand-in: ${thr('hyperdrive')}`,
    pgboss: '',
    graphile: '',
    target: '>= 0.6x',
    verdict: verdict(tr.throughput.hyperdrive ? tr.throughput.hyperdrive.oneTenantRatio >= 0.6 : undefined),
  });
} else if (phase('transport') && tr?.skipped) {
  rows.push({ workload: '9. transports', project: tr.skipped, pgboss: '', graphile: '', target: '', verdict: '' });
}

const model = get<ModelResult>('model');
if (phase('model') && model) {
  for (const r of model.runs) {
    const starts =
      r.workload === 'fanout'
        ? `, started ${fmtInt(r.startedPerSecond ?? 0)}/s after due, first/last start +${fmtInt(r.firstStartMs ?? 0)}/+${fmtInt(r.lastStartMs ?? 0)} ms`
        : '';
    // The fan-out's rate is its starts from the due instant: the look-ahead
    // sends most messages before it (at `sent`/s), as it should.
    const fanoutTarget = r.workload === 'fanout' ? 'all started <= 25 s after due, >= 4,500/s' : 'p99 <= 1 s';
    const met =
      r.workload === 'fanout'
        ? r.started === r.tasks && (r.lastStartMs ?? Infinity) <= 25_000 && (r.startedPerSecond ?? 0) >= 4500
        : r.started === r.tasks && r.dueToStartP99Ms <= 1000;
    rows.push({
      workload: `10. model ${r.workload} (${fmtInt(r.tasks)}), ${r.design}, ${r.shards} shard(s), ${model.roundTripMs} ms RTT, ${model.consumers} consumers/shard, ${model.pooled ? 'pooled' : 'direct'}`,
      project: `sent ${fmtInt(r.sentPerSecond)}/s, finished ${fmtInt(r.finishedPerSecond)}/s${starts}; due-to-start p50 ${fmtInt(r.dueToStartP50Ms)} ms, p99 ${fmtInt(r.dueToStartP99Ms)} ms; ${fmtInt(r.transactionsPerSecond)} xact/s, ${r.connections} connections (peak ${r.peakBackends}), ${r.pumpsSent} pumps; cores busy: machine ${fmt2(r.cpu.machine / r.cpu.wallSeconds)} of ${results.machine.cores}, Postgres ${fmt2(r.cpu.postgres / r.cpu.wallSeconds)}, Workers ${fmt2(r.cpu.bench / r.cpu.wallSeconds)}`,
      pgboss: '',
      graphile: '',
      target: fanoutTarget,
      verdict: verdict(r.design === 'parallel' ? met : undefined),
    });
  }
}

results.durationSeconds = Math.round((Date.now() - began) / 1000);
results.machine.loadAverageAtEnd = loadavg().map((l) => Number(l.toFixed(2)));
const table = renderTable(rows);
results.table = table;
const header = [
  `Machine: ${results.machine.cores} cores (${results.machine.cpu}), ${results.machine.memoryGiB} GiB; Node ${process.version}; PostgreSQL ${results.machine.postgres}; load average ${(results.machine.loadAverageAtStart as number[]).join(' ')} at start, ${(results.machine.loadAverageAtEnd as number[]).join(' ')} at end.`,
  `Run ${results.startedAt}, ${results.durationSeconds} s; ${settings.reps} repetitions after a warm-up, median (min–max); every figure printed only after its tasks were verified finished by SQL count.`,
  `pg-boss: ${JSON.stringify(pgbossSettings(settings).work)}, pool ${settings.pgboss.poolMax}. graphile-worker: ${JSON.stringify(graphileSettings(settings).worker)}. This project: ${settings.sweepers} sweep loops + ${settings.consumers} consumers, claims of ${benchConfig.sweepBatchSize}, consumer batches of ${settings.queueBatch}, over ${transportName(benchTransport)}, ${benchPlans === 'custom' ? 'every statement planned afresh (BENCH_PLANS=custom, as a Worker plans)' : 'generic plans on its pooled connections'}; latency sweep tick ${settings.tickMs / 1000} s.`,
];
const errors = Object.entries(results.errors).map(([k, v]) => `ERROR ${k}: ${v}`);
console.log([...header, '', table, ...(errors.length ? ['', ...errors] : [])].join('\n'));

const dir = join(root, 'bench/results');
await mkdir(join(dir, 'runs'), { recursive: true });
const json = JSON.stringify(results, null, 2) + '\n';
await writeFile(join(dir, 'latest.json'), json);
await writeFile(join(dir, 'runs', `${results.startedAt.replace(/[:.]/g, '-')}.json`), json);
progress(`done in ${results.durationSeconds} s; results in bench/results/latest.json`);
process.exit(Object.keys(results.errors).length > 0 ? 1 : 0);
