// Reads the bindings once per isolate and opens the database for one
// invocation. A connection never outlives the invocation that opened it.
//
// The transport is chosen from the bindings: a HYPERDRIVE binding means `pg`
// over Hyperdrive (recommended: pooled connections set up near the Worker);
// without one, the Neon serverless driver over WebSockets to DATABASE_URL.
// DATABASE_TRANSPORT=neon forces the latter even with the binding (local use).
import { readConfig, type Config } from '../src/config.ts';
import { createNeonDb } from '../src/db/neon.ts';
import { createPgDb } from '../src/db/pg.ts';
import type { Db } from '../src/db/seam.ts';
import { createRegistry, type Registry } from '../src/handlers/registry.ts';
import { createLogger, type Logger } from '../src/log.ts';
import { createShardedSender } from '../src/sweep/shards.ts';
import type { PumpSender, TaskSender } from '../src/queue/messages.ts';
import { createSigningSecretStore, type SigningSecretStore } from '../src/tenants/signing-secrets.ts';
import type { Env } from './env.ts';
import { taskTypes } from './tasks.ts';

export interface Shared {
  config: Config;
  registry: Registry;
  log: Logger;
  /** Per-tenant webhook secrets, encrypted under SIGNING_SECRET (which signs nothing itself). */
  signingSecrets: SigningSecretStore;
}

const shared = new WeakMap<object, Shared>();

export function sharedFor(env: Env): Shared {
  let s = shared.get(env);
  if (!s) {
    const config = readConfig(env);
    const registry = createRegistry(taskTypes({ config }));
    s = {
      config,
      registry,
      log: createLogger({ level: config.logLevel }),
      signingSecrets: createSigningSecretStore(env.SIGNING_SECRET || undefined),
    };
    shared.set(env, s);
  }
  return s;
}

export type Transport = 'hyperdrive' | 'neon';

export function transportFor(env: Env): Transport {
  return env.HYPERDRIVE?.connectionString && env.DATABASE_TRANSPORT !== 'neon' ? 'hyperdrive' : 'neon';
}

/** Who opens the database: each has its own statement budget. */
export type Caller = 'http' | 'sweep' | 'consumer';

/** maxConnections: 4 by default; a pump takes 1 (it claims and sends serially). */
export function openDb(env: Env, caller: Caller = 'http', maxConnections = 4): Db {
  const { config } = sharedFor(env);
  const timeouts = {
    connectTimeoutMs: config.dbConnectTimeoutMs,
    statementTimeoutMs:
      caller === 'sweep' ? config.sweepStatementTimeoutMs : caller === 'consumer' ? config.consumerStatementTimeoutMs : config.dbStatementTimeoutMs,
  };
  if (transportFor(env) === 'hyperdrive') {
    return createPgDb({ connectionString: env.HYPERDRIVE!.connectionString, maxConnections, ...timeouts });
  }
  if (!env.DATABASE_URL) throw new Error('neither a HYPERDRIVE binding nor DATABASE_URL is set (see the README, Deploy)');
  return createNeonDb({
    connectionString: env.DATABASE_URL,
    wsProxy: env.DATABASE_WS_PROXY || undefined,
    maxConnections,
    ...timeouts,
  });
}

const queues = new WeakMap<object, TaskSender & PumpSender>();

/**
 * The task Queue the sweep, the kick and the pumps send to: TASKS, or with
 * QUEUE_SHARDS = N the shards TASKS, TASKS_1 .. TASKS_{N-1} (wrangler.toml).
 */
export function tasksQueue(env: Env): TaskSender & PumpSender {
  let q = queues.get(env);
  if (!q) {
    const n = sharedFor(env).config.queueShards;
    const shards: TaskSender[] = [env.TASKS];
    for (let i = 1; i < n; i++) {
      const binding = env[`TASKS_${i}`] as Partial<TaskSender> | undefined;
      if (typeof binding?.sendBatch !== 'function') {
        throw new Error(`QUEUE_SHARDS is ${n}, but the producer binding TASKS_${i} is missing (wrangler.toml)`);
      }
      shards.push(binding as TaskSender);
    }
    q = n === 1 ? env.TASKS : createShardedSender(shards);
    queues.set(env, q);
  }
  return q;
}
