// Every size and knob of `npm run bench`, read once from the environment.
// Defaults are the (20,000 tasks, batches of 1,000, 500 latency
// probes over 20 s, 1,000,000 finished rows, 3 repetitions) except the
// one-request-at-a-time enqueues: their rate is bound per request, not per
// task, and 20,000 of them would take ~35 s per peer repetition and ~13 min
// per HTTP repetition on this machine (Postgres accepts ~30-50 new
// connections/s here, and the Worker opens one per request), so they default
// to 5,000 library calls and 500 HTTP requests, enough for a stable rate.
// Smaller values make a quick run (BENCH_TASKS=2000 BENCH_REPS=1 ...).
import { availableParallelism } from 'node:os';

function int(name: string, fallback: number, min = 0): number {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return fallback;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < min) throw new Error(`${name} must be an integer >= ${min} (got ${raw})`);
  return n;
}

function list(name: string, fallback: readonly string[]): string[] {
  const raw = process.env[name];
  if (raw === undefined || raw.trim() === '') return [...fallback];
  return raw.split(',').map((s) => s.trim()).filter(Boolean);
}

export const ALL_SYSTEMS = ['project', 'pg-boss', 'graphile-worker'] as const;
export type SystemName = (typeof ALL_SYSTEMS)[number];

export const ALL_PHASES = [
  'enqueue',
  'drain',
  'latency',
  'drain-1m',
  'statements',
  'fenced',
  'fairness',
  'ceiling',
  'bundle',
  'memory',
  'metrics',
  'transport',
  'model',
  'flow',
  'floor',
] as const;
export type PhaseName = (typeof ALL_PHASES)[number];

export interface Settings {
  /** A server URL (any database on it); unset: an embedded Postgres. */
  databaseUrl: string | undefined;
  cores: number;
  reps: number;
  /** Tasks per enqueue and drain repetition. */
  tasks: number;
  /** Tasks per one-at-a-time enqueue repetition of the peers' library calls. */
  singleTasks: number;
  /** Tasks per one-request-at-a-time enqueue repetition over HTTP through the Worker. */
  httpSingleTasks: number;
  singleConcurrency: number;
  batchSize: number;
  /** This project's drain topology: concurrent sweep loops and consumer loops. */
  sweepers: number;
  consumers: number;
  /** Messages per consumer invocation (Queues deliver at most 100). */
  queueBatch: number;
  /** A sweep loop that found nothing waits this long before sweeping again. */
  sweepIdleMs: number;
  latencyTasks: number;
  latencySpreadMs: number;
  latencyLeadMs: number;
  /** Sweep ticker of the latency workload (npm start ticks every 5 s; the cron every 60 s). */
  tickMs: number;
  finishedRows: number;
  /** Issue 16: when > 0, every task of the project's drain carries `concurrency: {key, limit}` with this limit. */
  drainConcurrencyLimit: number;
  /** Also seed pg-boss with finished rows for the 1M drain. */
  peers1m: boolean;
  pgbenchSeconds: number;
  fairnessBacklog: number;
  fairnessLate: number;
  /** Tasks left running under the fenced-writes workload (issue 12). */
  fencedRunning: number;
  /** Bytes of padding in every enqueue and drain payload, every system alike (0: `{n}` alone). */
  payloadBytes: number;
  systems: SystemName[];
  phases: PhaseName[];
  /** pg-boss work(): documented batch settings. */
  pgboss: { batchSize: number; localConcurrency: number; pollingIntervalSeconds: number; burstWhenBatchFull: boolean; poolMax: number };
  /** graphile-worker run(): the settings of its performance page. */
  graphile: { concurrentJobs: number; maxPoolSize: number; localQueueSize: number; completeJobBatchDelay: number; failJobBatchDelay: number; pollInterval: number };
}

export function readSettings(): Settings {
  const systems = list('BENCH_SYSTEMS', ALL_SYSTEMS);
  for (const s of systems) if (!(ALL_SYSTEMS as readonly string[]).includes(s)) throw new Error(`BENCH_SYSTEMS: unknown system ${s}`);
  const phases = list('BENCH_PHASES', ALL_PHASES);
  for (const p of phases) if (!(ALL_PHASES as readonly string[]).includes(p)) throw new Error(`BENCH_PHASES: unknown phase ${p}`);
  const tasks = int('BENCH_TASKS', 20_000, 100);
  return {
    databaseUrl: process.env.DATABASE_URL || undefined,
    cores: availableParallelism(),
    reps: int('BENCH_REPS', 3, 1),
    tasks,
    singleTasks: int('BENCH_SINGLE_TASKS', Math.min(tasks, 5_000), 10),
    httpSingleTasks: int('BENCH_HTTP_SINGLE_TASKS', Math.min(tasks, 500), 10),
    singleConcurrency: int('BENCH_SINGLE_CONCURRENCY', 10, 1),
    batchSize: int('BENCH_BATCH', 1000, 1),
    sweepers: int('BENCH_SWEEPERS', 2, 1),
    consumers: int('BENCH_CONSUMERS', 4, 1),
    queueBatch: int('BENCH_QUEUE_BATCH', 100, 1),
    sweepIdleMs: int('BENCH_SWEEP_IDLE_MS', 50, 1),
    latencyTasks: int('BENCH_LATENCY_TASKS', 500, 10),
    latencySpreadMs: int('BENCH_LATENCY_SPREAD_MS', 20_000, 100),
    latencyLeadMs: int('BENCH_LATENCY_LEAD_MS', 3_000, 0),
    tickMs: int('BENCH_TICK_MS', 5_000, 100),
    finishedRows: int('BENCH_FINISHED_ROWS', 1_000_000, 0),
    drainConcurrencyLimit: int('BENCH_DRAIN_CONCURRENCY_LIMIT', 0, 0),
    peers1m: int('BENCH_PEERS_1M', 1, 0) === 1,
    pgbenchSeconds: int('BENCH_PGBENCH_SECONDS', 8, 1),
    fairnessBacklog: int('BENCH_FAIRNESS_BACKLOG', 3_000, 100),
    fairnessLate: int('BENCH_FAIRNESS_LATE', 300, 10),
    fencedRunning: int('BENCH_RUNNING', 10_000, 100),
    payloadBytes: payloadBytes(),
    systems: systems as SystemName[],
    phases: phases as PhaseName[],
    pgboss: {
      batchSize: int('BENCH_PGBOSS_BATCH', 500, 1),
      localConcurrency: int('BENCH_PGBOSS_CONCURRENCY', 2, 1),
      pollingIntervalSeconds: 0.5,
      burstWhenBatchFull: true,
      poolMax: int('BENCH_PGBOSS_POOL', 10, 2),
    },
    graphile: {
      concurrentJobs: int('BENCH_GRAPHILE_JOBS', 24, 1),
      maxPoolSize: int('BENCH_GRAPHILE_POOL', 25, 2),
      localQueueSize: int('BENCH_GRAPHILE_LOCAL_QUEUE', 500, 1),
      completeJobBatchDelay: 0,
      failJobBatchDelay: 0,
      pollInterval: int('BENCH_GRAPHILE_POLL_MS', 500, 100),
    },
  };
}

/**
 * BENCH_PAYLOAD_BYTES: a payload of production size. Real payloads (an http
 * task's url, headers and body) run to hundreds of bytes; the default `{n}` is
 * about 20, which hides what a row's width costs every write.
 */
function payloadBytes(): number {
  return int('BENCH_PAYLOAD_BYTES', 0, 0);
}

/** The payload of the n-th bench task, for every system: `{n}`, padded to BENCH_PAYLOAD_BYTES. */
export function benchPayload(n: number): { n: number; pad?: string } {
  const bytes = payloadBytes();
  return bytes > 0 ? { n, pad: 'x'.repeat(bytes) } : { n };
}
