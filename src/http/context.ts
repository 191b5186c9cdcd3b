// What every request handler can reach: per-invocation dependencies (the
// database opened for this request, the Queue producer, waitUntil) arrive as
// Hono's Bindings; what middleware derives (tenant, request id, logger) as
// Variables. What the app is built from (AppDeps) and its type (App) live here
// too, so the route files need not import the app that registers them.
import type { OpenAPIHono } from '@hono/zod-openapi';
import type { Config } from '../config.ts';
import type { Db } from '../db/seam.ts';
import type { Registry } from '../handlers/registry.ts';
import type { Logger } from '../log.ts';
import type { Kicker } from '../sweep/kick.ts';
import type { PumpSender, TaskSender } from '../queue/messages.ts';
import type { KeyCache } from '../tenants/key-cache.ts';
import type { SigningSecretStore } from '../tenants/signing-secrets.ts';
import type { TraceContext } from '../tracing/trace-context.ts';

export interface Invocation {
  db: Db;
  sender: TaskSender;
  /** Where a kick meeting a backlog asks for pumps (issue 13); unset: it does not. */
  pumps?: PumpSender;
  /** Keeps work alive after the response (Workers' ctx.waitUntil). */
  waitUntil(promise: Promise<unknown>): void;
  /** Clock override for tests; production leaves it unset. */
  now?: Date;
}

export interface AppEnv {
  Bindings: Invocation;
  Variables: {
    requestId: string;
    log: Logger;
    /** The tenant every tenant-facing query is scoped by. */
    tenant: string;
    /** Set by requireCaller (GET /metrics): the admin sees every tenant, a key its own. */
    caller: { admin: true; tenant: null } | { admin: false; tenant: string };
    /** The request's W3C trace context (traceparent, tracestate), when it carried a valid one. */
    trace: TraceContext | null;
  };
}

export interface AppDeps {
  config: Config;
  registry: Registry;
  /** The admin token secret; empty, or shorter than 32 characters, disables admin access. */
  adminToken: string;
  log: Logger;
  /** Checked tenant keys, per isolate; built from config.keyCacheMs when absent. */
  keyCache?: KeyCache;
  /** The dispatch kick after enqueues, per isolate; built from config.kickIntervalMs when absent. */
  kicker?: Kicker;
  /** The tenants' webhook signing secrets (GET /v1/signing-secret). */
  signingSecrets: SigningSecretStore;
}

export type App = OpenAPIHono<AppEnv>;
