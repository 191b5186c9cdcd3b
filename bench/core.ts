// The project's core, wired as the Worker wires it (functions/), over the
// project's database seam (the Neon driver through the WebSocket proxy), with
// only the Queue replaced by the in-process hand-off (handoff.ts).
import { z } from 'zod';
import { loadMigrations } from '../scripts/migrations.ts';
import { openNodeDb } from '../scripts/node-db.ts';
import { taskTypes } from '../functions/tasks.ts';
import { createPgDb } from '../src/db/pg.ts';
import { defaultConfig, type Config } from '../src/config.ts';
import { consumeBatch } from '../src/consume/consume.ts';
import { migrate } from '../src/db/migrate.ts';
import type { Db, Queryable, Sql } from '../src/db/seam.ts';
import { createRegistry, defineTask, type Registry } from '../src/handlers/registry.ts';
import { createLogger, type Logger } from '../src/log.ts';
import type { TaskMessage } from '../src/queue/messages.ts';
import { invocationId, sweepOnce } from '../src/sweep/sweep.ts';
import { processRunNs } from './cpu.ts';
import type { Handoff } from './handoff.ts';
import { progress, sleep } from './stats.ts';

export const BENCH_TENANT = 'bench';

/** Warnings and errors the core logs during a run: counted, the first few shown. */
export function benchLogger(label: string): { log: Logger; problems(): number; deadlocks(): number } {
  let problems = 0;
  let deadlocks = 0;
  const log = createLogger({
    level: 'warn',
    sink: (_level, line) => {
      problems += 1;
      if (line.includes('deadlock detected')) deadlocks += 1;
      if (problems <= 5) progress(`${label}: core logged ${line.slice(0, 300)}`);
    },
  });
  return { log, problems: () => problems, deadlocks: () => deadlocks };
}

/** Records, per probe task, how late its handler started after its run_at (ms). */
export function createProbe(): { handler: ReturnType<typeof defineTask>; lateness: Map<string, number> } {
  const lateness = new Map<string, number>();
  const handler = defineTask('bench-probe', z.object({ runAt: z.number() }), async (payload, ctx) => {
    lateness.set(ctx.taskId, Date.now() - payload.runAt);
  });
  return { handler, lateness };
}

export function benchRegistry(config: Config, extra: ReturnType<typeof defineTask>[] = []): Registry {
  return createRegistry([...taskTypes({ config }), ...extra]);
}

export const benchConfig: Config = { ...defaultConfig };

/**
 * BENCH_TRANSPORT: `neon` (default), the Neon driver over the WebSocket proxy;
 * `hyperdrive`, `pg` over TCP, as Hyperdrive's local mode connects and as the
 * peers connect (the recommended production transport, issue 14).
 */
export type BenchTransport = 'neon' | 'hyperdrive';
export const benchTransport: BenchTransport = process.env.BENCH_TRANSPORT === 'hyperdrive' ? 'hyperdrive' : 'neon';
/** The transport the bench does not run on, for the one workload measured over both (the core batch enqueue). */
export const otherTransport: BenchTransport = benchTransport === 'hyperdrive' ? 'neon' : 'hyperdrive';
export const transportName = (t: BenchTransport) => (t === 'hyperdrive' ? 'pg (the Hyperdrive transport)' : 'the Neon driver and the WebSocket proxy');

export async function openProjectDb(url: string, proxy: string, maxConnections = 1, transport = benchTransport): Promise<Db> {
  const db =
    transport === 'hyperdrive'
      ? createPgDb({ connectionString: url, maxConnections, applicationName: 'bench-project', statementTimeoutMs: 0 })
      : await openNodeDb(url, { wsProxy: proxy, maxConnections, applicationName: 'bench-project' });
  await db.query('select 1');
  return db;
}

/**
 * BENCH_PLANS: `pooled` (default), the bench's long-lived connections, on
 * which Postgres plans a named statement once for any parameters after its
 * fifth run (a generic plan), as it does for the peers' pools; `custom`, every
 * statement of this project planned afresh, as a Worker's are: each
 * invocation opens a connection of its own, so none runs a statement twice.
 */
export const benchPlans: 'pooled' | 'custom' = process.env.BENCH_PLANS === 'custom' ? 'custom' : 'pooled';

export async function migrateProject(url: string, proxy: string): Promise<void> {
  const db = await openProjectDb(url, proxy);
  try {
    await migrate(db, await loadMigrations());
    if (benchPlans === 'custom') {
      await db.query(`do $$ begin
                        execute format('alter database %I set plan_cache_mode = force_custom_plan', current_database());
                      end $$`);
    }
  } finally {
    await db.close();
  }
}

/** The backend process of a one-connection Db (for processRunNs on a local server). */
export async function backendPidOf(db: Queryable): Promise<number> {
  return (await db.query<{ pid: number }>('select pg_backend_pid() as pid'))[0]!.pid;
}

export interface StatementTimes {
  /** cpuMs: the backend's CPU for them, when the connection's backend pid was given (Linux). */
  [name: string]: { count: number; totalMs: number; cpuMs?: number };
}

/**
 * Wraps a Db so every statement's latency is summed by name (for the
 * analysis), and with `backendPid` (its one connection's backend on a local
 * server) the backend's CPU for it: the connection runs one statement at a
 * time, so what its backend ran meanwhile is that statement's.
 */
export function timeStatements(db: Db, times: StatementTimes, backendPid?: number): Db {
  const wrap = (q: Queryable): Queryable => ({
    async query(s: Sql | string, values?: readonly unknown[]) {
      const name = typeof s === 'string' ? s.trim().split(/\s+/).slice(0, 2).join(' ').toLowerCase() : s.name;
      const t0 = performance.now();
      const c0 = backendPid === undefined ? 0 : processRunNs(backendPid);
      try {
        return await q.query(s, values);
      } finally {
        const t = (times[name] ??= { count: 0, totalMs: 0 });
        t.count += 1;
        t.totalMs += performance.now() - t0;
        if (backendPid !== undefined) t.cpuMs = (t.cpuMs ?? 0) + (processRunNs(backendPid) - c0) / 1e6;
      }
    },
  }) as Queryable;
  return { ...wrap(db), transaction: (fn) => db.transaction((tx) => fn(wrap(tx))), close: () => db.close() };
}

export interface Pipeline {
  /** Resolves when `expected` tasks have succeeded (or rejects on a stall). */
  done: Promise<void>;
  succeeded(): number;
  problems(): number;
  /** Sweeps that threw (a failed cron invocation: the next sweep carries on). */
  sweepErrors(): number;
  /** Statements that lost a deadlock (40P01), in sweeps or consumer batches. */
  deadlocks(): number;
  /** Consumer batches answered with `retry` (redelivered after retryDelayMs, as the Worker asks). */
  retriedMessages(): number;
  stop(): Promise<void>;
}

/**
 * Sweep loops and consumer loops as the deployment runs them: each loop
 * holds its own connection (a Worker invocation opens one), sweeps with the
 * real `sweepOnce`, and consumes with the real `consumeBatch`.
 */
export function startPipeline(options: {
  sweepDbs: Db[];
  consumerDbs: Db[];
  handoff: Handoff;
  config: Config;
  registry: Registry;
  expected: number;
  queueBatch: number;
  /** Pause between sweeps: `sweepIdleMs` after an empty one, or always `tickMs` when set. */
  sweepIdleMs: number;
  tickMs?: number;
  label: string;
  stallMs?: number;
  retryDelayMs?: number;
}): Pipeline {
  const { handoff, config, registry } = options;
  const { log, problems, deadlocks } = benchLogger(options.label);
  let sweepDeadlocks = 0;
  let stopping = false;
  let succeeded = 0;
  let sweepErrors = 0;
  let retriedMessages = 0;
  let lastProgress = Date.now();
  let resolveDone!: () => void;
  let rejectDone!: (e: unknown) => void;
  const done = new Promise<void>((resolve, reject) => {
    resolveDone = resolve;
    rejectDone = reject;
  });
  done.catch(() => {});
  const fail = (error: unknown) => {
    stopping = true;
    rejectDone(error);
  };

  const sweepers = options.sweepDbs.map(async (db) => {
    // Ids as production writes them to claimed_by (every version of a claimed row carries one).
    const deps = { db, config, sender: handoff, log, workerId: invocationId('cron') };
    while (!stopping) {
      let claimed = 0;
      try {
        claimed = (await sweepOnce(deps)).claimed;
      } catch (error) {
        // As a cron invocation that throws: logged, and the next one carries on.
        sweepErrors += 1;
        if ((error as Error).message.includes('deadlock detected')) sweepDeadlocks += 1;
        if (sweepErrors <= 3) progress(`${options.label}: sweep failed: ${(error as Error).message}`);
      }
      if (options.tickMs !== undefined) await sleep(options.tickMs);
      else if (claimed === 0) await sleep(options.sweepIdleMs);
    }
  });
  const consumers = options.consumerDbs.map(async (db) => {
    const deps = { db, config, registry, log };
    for (;;) {
      const batch = await handoff.receive(options.queueBatch);
      if (batch.length === 0) return;
      const out = await consumeBatch(deps, batch);
      const retry: TaskMessage[] = [];
      out.verdicts.forEach((v, i) => {
        if (v === 'retry') retry.push(batch[i]!);
      });
      // As the Worker does: m.retry({ delaySeconds: 10 }).
      if (retry.length > 0) {
        retriedMessages += retry.length;
        handoff.redeliver(retry, options.retryDelayMs ?? 10_000);
      }
      const ok = out.results.filter((r) => r.status === 'succeeded').length;
      if (ok > 0) lastProgress = Date.now();
      succeeded += ok;
      if (succeeded >= options.expected) resolveDone();
    }
  });
  for (const p of [...sweepers, ...consumers]) p.catch(fail);
  const watchdog = setInterval(() => {
    if (Date.now() - lastProgress > (options.stallMs ?? 120_000)) {
      fail(new Error(`${options.label}: no task finished for ${(options.stallMs ?? 120_000) / 1000} s (${succeeded}/${options.expected})`));
    }
  }, 1000);

  return {
    done,
    succeeded: () => succeeded,
    problems,
    sweepErrors: () => sweepErrors,
    deadlocks: () => deadlocks() + sweepDeadlocks,
    retriedMessages: () => retriedMessages,
    async stop() {
      stopping = true;
      clearInterval(watchdog);
      handoff.close();
      await Promise.allSettled([...sweepers, ...consumers]);
    },
  };
}
