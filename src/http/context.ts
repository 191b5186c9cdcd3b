// What every request handler can reach: per-invocation dependencies (the
// database opened for this request, the Queue producer, waitUntil) arrive as
// Hono's Bindings; what middleware derives (tenant, request id, logger) as
// Variables.
import type { Db } from '../db/seam.ts';
import type { Logger } from '../log.ts';
import type { PumpSender, TaskSender } from '../sweep/sweep.ts';
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
