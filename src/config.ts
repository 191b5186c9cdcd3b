// Tunables, read once per invocation from the Worker's vars (or any record of
// strings). Each has a default that suits a one-minute cron; the README lists
// them. An invalid value fails loudly, naming the variable.
import { z } from 'zod';
import { LOG_LEVELS, type LogLevel } from './log.ts';
import { MAX_TIMEOUT_SECONDS } from './tasks/options.ts';

const int = (min: number, max: number) => z.coerce.number().int().min(min).max(max);
const bool = z
  .enum(['true', 'false', '1', '0', 'yes', 'no', 'on', 'off'])
  .transform((v) => ['true', '1', 'yes', 'on'].includes(v));

const ConfigSchema = z.object({
  /** Least severe log level written: `info` in production, `warn` in the tests. */
  LOG_LEVEL: z.enum(LOG_LEVELS).default('info'),
  /**
   * Most tasks one claim statement takes; they are sent in sendBatch calls of
   * at most 100 (the Queues limit), all at once, and marked dispatched in one
   * statement. 500 rather than 100: a claim's planning and set-up are paid
   * per statement, and at 500 the drain spent 15-20 % less Postgres CPU per
   * task (BENCHMARKS.md, issue 12); 1,000 gained nothing more.
   */
  SWEEP_BATCH_SIZE: int(1, 1000).default(500),
  /** Most scheduled tasks one promote statement makes runnable. */
  PROMOTE_BATCH_SIZE: int(1, 10_000).default(1000),
  /** Most due schedules one materialization batch (one transaction) takes. */
  SCHEDULE_BATCH_SIZE: int(1, 10_000).default(500),
  /** Most expired leases one reap statement handles. */
  REAP_BATCH_SIZE: int(1, 10_000).default(500),
  /** Most finished tasks one purge statement deletes. */
  PURGE_BATCH_SIZE: int(1, 10_000).default(1000),
  /** Wall-clock budget of one sweep; steps stop starting new batches past it. */
  SWEEP_TIME_BUDGET_MS: int(100, 900_000).default(20_000),
  /**
   * The consumer's max_batch_timeout (wrangler.toml): delayed messages are sent
   * this much earlier, so a batch the Queue holds that long still arrives
   * before its tasks are due; the consumer waits out the rest.
   */
  QUEUE_BATCH_TIMEOUT_SECONDS: int(0, 60).default(1),
  /** Tasks due within this window are claimed early and sent with a delay. */
  LOOKAHEAD_SECONDS: int(0, 600).default(60),
  /** How long a claimed task may stay unsent before the reaper gives it back (no attempt spent). */
  CLAIM_LEASE_SECONDS: int(5, 3600).default(60),
  /** How long a sent task may wait for the consumer to start it before the reaper counts the attempt failed. */
  DISPATCH_LEASE_SECONDS: int(10, 43_200).default(900),
  /** Slack added to a task's timeout when its lease is set at start. */
  LEASE_GRACE_SECONDS: int(1, 3600).default(30),
  /** Finished tasks are deleted after this many seconds (default 7 days). */
  RETENTION_SECONDS: int(60, 10 * 365 * 86_400).default(7 * 86_400),
  /** Spent idempotency keys are kept this long after their task row is deleted; 0 keeps them forever. */
  SPENT_KEY_RETENTION_SECONDS: int(0, 100 * 365 * 86_400).default(0),
  DEFAULT_MAX_ATTEMPTS: int(1, 100).default(5),
  DEFAULT_TIMEOUT_SECONDS: int(1, MAX_TIMEOUT_SECONDS).default(30),
  DEFAULT_BACKOFF_BASE_SECONDS: z.coerce.number().min(0.001).max(86_400).default(1),
  DEFAULT_BACKOFF_MAX_SECONDS: z.coerce.number().min(0.001).max(7 * 86_400).default(3600),
  /** Largest task payload, in bytes of JSON. */
  MAX_PAYLOAD_BYTES: int(1, 1024 * 1024).default(256 * 1024),
  /** Lets the built-in http task reach private, loopback and link-local addresses, on any port. */
  ALLOW_PRIVATE_TARGETS: bool.default(false),
  /** Longest wait for a database connection (socket, start-up, auth); past it, 503 database_unavailable. */
  DB_CONNECT_TIMEOUT_MS: int(100, 60_000).default(5_000),
  /** Longest wait for one statement's answer in an HTTP request; past it, 503 database_unavailable. */
  DB_STATEMENT_TIMEOUT_MS: int(100, 120_000).default(10_000),
  /** The same for the sweep, whose batches are larger; stays under its time budget. */
  SWEEP_STATEMENT_TIMEOUT_MS: int(100, 900_000).default(15_000),
  /** The same for the consumer; past it the batch is retried by the Queue. */
  CONSUMER_STATEMENT_TIMEOUT_MS: int(100, 120_000).default(10_000),
  /**
   * How long an isolate trusts a tenant key it has checked (seconds, at most
   * 5): a revoked key stops working everywhere within this bound. 0 checks
   * every request against the database.
   */
  KEY_CACHE_SECONDS: z.coerce.number().min(0).max(5).default(5),
  /**
   * Most dispatchers (the sweep's dispatch step and the pumps it fans out to)
   * claiming and sending at once, enforced in Postgres (dispatcher_slots).
   * 0: today's design, the sweep alone dispatches, serially, within its budget.
   */
  MAX_DISPATCHERS: int(0, 64).default(4),
  /**
   * Task Queues the dispatchers spread messages over (by a stable hash of the
   * task id): producer bindings TASKS, TASKS_1 .. TASKS_{N-1}, one consumer each.
   */
  QUEUE_SHARDS: int(1, 16).default(1),
  /** Wall-clock budget of one pump invocation's dispatch; it re-arms while the backlog lasts. */
  PUMP_TIME_BUDGET_MS: int(100, 900_000).default(20_000),
  /** An isolate kicks dispatch of one queue at most once per this many ms after enqueues. */
  KICK_INTERVAL_MS: int(0, 10_000).default(250),
  /** Default quota: most pending (scheduled + queued + running) tasks one tenant may hold. */
  QUOTA_MAX_PENDING_TASKS: int(0, 100_000_000).default(1_000_000),
  /** Default quota: most schedules one tenant may define. */
  QUOTA_MAX_SCHEDULES: int(0, 1_000_000).default(10_000),
  /** Default quota: the shortest period a tenant's schedule may fire at (1: every second is allowed). */
  QUOTA_MIN_SCHEDULE_INTERVAL_SECONDS: int(1, 31_622_400).default(1),
  /** Ports the built-in http task may reach besides 80 and 443: comma-separated, e.g. "8443,8080". */
  ALLOWED_TARGET_PORTS: z
    .string()
    .regex(/^\s*(\d{1,5}\s*(,\s*\d{1,5}\s*)*)?$/, 'comma-separated port numbers')
    .transform((s) => s.split(',').map((p) => p.trim()).filter((p) => p !== '').map(Number))
    .refine((ports) => ports.every((p) => p >= 1 && p <= 65_535), 'ports are 1 to 65535')
    .default([]),
  /** /metrics lists at most this many tenants by name (the busiest); the rest are summed as tenant="other". */
  METRICS_MAX_TENANTS: int(1, 1000).default(20),
});

export interface Config {
  logLevel: LogLevel;
  sweepBatchSize: number;
  promoteBatchSize: number;
  scheduleBatchSize: number;
  reapBatchSize: number;
  purgeBatchSize: number;
  sweepTimeBudgetMs: number;
  lookaheadSeconds: number;
  queueBatchTimeoutSeconds: number;
  claimLeaseSeconds: number;
  dispatchLeaseSeconds: number;
  leaseGraceSeconds: number;
  retentionSeconds: number;
  spentKeyRetentionSeconds: number;
  defaultMaxAttempts: number;
  defaultTimeoutMs: number;
  defaultBackoffBaseMs: number;
  defaultBackoffMaxMs: number;
  maxPayloadBytes: number;
  allowPrivateTargets: boolean;
  dbConnectTimeoutMs: number;
  dbStatementTimeoutMs: number;
  sweepStatementTimeoutMs: number;
  consumerStatementTimeoutMs: number;
  keyCacheMs: number;
  kickIntervalMs: number;
  maxDispatchers: number;
  queueShards: number;
  pumpTimeBudgetMs: number;
  quotaMaxPendingTasks: number;
  quotaMaxSchedules: number;
  quotaMinScheduleIntervalSeconds: number;
  allowedTargetPorts: number[];
  metricsMaxTenants: number;
}

/** Reads the tunables from string vars; empty strings count as unset. */
export function readConfig(vars: Record<string, unknown>): Config {
  const present: Record<string, unknown> = {};
  for (const key of Object.keys(ConfigSchema.shape)) {
    const value = vars[key];
    if (value !== undefined && value !== '') present[key] = typeof value === 'string' ? value.trim() : String(value);
  }
  const parsed = ConfigSchema.safeParse(present);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    throw new Error(`invalid configuration ${String(issue.path[0])}: ${issue.message}`);
  }
  const v = parsed.data;
  return {
    logLevel: v.LOG_LEVEL,
    sweepBatchSize: v.SWEEP_BATCH_SIZE,
    promoteBatchSize: v.PROMOTE_BATCH_SIZE,
    scheduleBatchSize: v.SCHEDULE_BATCH_SIZE,
    reapBatchSize: v.REAP_BATCH_SIZE,
    purgeBatchSize: v.PURGE_BATCH_SIZE,
    sweepTimeBudgetMs: v.SWEEP_TIME_BUDGET_MS,
    lookaheadSeconds: v.LOOKAHEAD_SECONDS,
    queueBatchTimeoutSeconds: v.QUEUE_BATCH_TIMEOUT_SECONDS,
    claimLeaseSeconds: v.CLAIM_LEASE_SECONDS,
    dispatchLeaseSeconds: v.DISPATCH_LEASE_SECONDS,
    leaseGraceSeconds: v.LEASE_GRACE_SECONDS,
    retentionSeconds: v.RETENTION_SECONDS,
    spentKeyRetentionSeconds: v.SPENT_KEY_RETENTION_SECONDS,
    defaultMaxAttempts: v.DEFAULT_MAX_ATTEMPTS,
    defaultTimeoutMs: v.DEFAULT_TIMEOUT_SECONDS * 1000,
    defaultBackoffBaseMs: Math.round(v.DEFAULT_BACKOFF_BASE_SECONDS * 1000),
    defaultBackoffMaxMs: Math.round(v.DEFAULT_BACKOFF_MAX_SECONDS * 1000),
    maxPayloadBytes: v.MAX_PAYLOAD_BYTES,
    allowPrivateTargets: v.ALLOW_PRIVATE_TARGETS,
    dbConnectTimeoutMs: v.DB_CONNECT_TIMEOUT_MS,
    dbStatementTimeoutMs: v.DB_STATEMENT_TIMEOUT_MS,
    sweepStatementTimeoutMs: v.SWEEP_STATEMENT_TIMEOUT_MS,
    consumerStatementTimeoutMs: v.CONSUMER_STATEMENT_TIMEOUT_MS,
    keyCacheMs: Math.round(v.KEY_CACHE_SECONDS * 1000),
    kickIntervalMs: v.KICK_INTERVAL_MS,
    maxDispatchers: v.MAX_DISPATCHERS,
    queueShards: v.QUEUE_SHARDS,
    pumpTimeBudgetMs: v.PUMP_TIME_BUDGET_MS,
    quotaMaxPendingTasks: v.QUOTA_MAX_PENDING_TASKS,
    quotaMaxSchedules: v.QUOTA_MAX_SCHEDULES,
    quotaMinScheduleIntervalSeconds: v.QUOTA_MIN_SCHEDULE_INTERVAL_SECONDS,
    allowedTargetPorts: v.ALLOWED_TARGET_PORTS,
    metricsMaxTenants: v.METRICS_MAX_TENANTS,
  };
}

export const defaultConfig: Config = readConfig({});
