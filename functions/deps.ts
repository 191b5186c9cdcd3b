// Reads the bindings once per isolate and opens the database for one
// invocation. A connection never outlives the invocation that opened it.
import { readConfig, type Config } from '../src/config.ts';
import { createNeonDb } from '../src/db/neon.ts';
import type { Db } from '../src/db/seam.ts';
import { createRegistry, type Registry } from '../src/handlers/registry.ts';
import { createLogger, type Logger } from '../src/log.ts';
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
    s = { config, registry, log: createLogger(), signingSecrets: createSigningSecretStore(env.SIGNING_SECRET || undefined) };
    shared.set(env, s);
  }
  return s;
}

export function openDb(env: Env): Db {
  if (!env.DATABASE_URL) throw new Error('DATABASE_URL is not set (wrangler secret put DATABASE_URL)');
  return createNeonDb({
    connectionString: env.DATABASE_URL,
    wsProxy: env.DATABASE_WS_PROXY || undefined,
    maxConnections: 4,
  });
}

/** A fresh id per invocation, written to claimed_by. */
export function invocationId(kind: string): string {
  return `${kind}:${crypto.randomUUID()}`;
}
