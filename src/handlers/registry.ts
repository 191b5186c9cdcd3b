// Task types: each registered with a zod schema for its payload, so the API
// refuses an unknown type or a bad payload at enqueue time, with the field
// paths, instead of letting the task die later.
import type { z } from 'zod';
import { invalid } from '../errors.ts';
import { zodDetails } from '../zod-details.ts';
import type { Logger } from '../log.ts';
import type { TraceContext } from '../tracing/trace-context.ts';

/** What a running handler knows about its attempt, and its fence. */
export interface TaskContext {
  taskId: string;
  /** The webhook-id of this task's deliveries: the task id, or `<id>.callback` for a completion callback. */
  webhookId?: string;
  tenant: string;
  queue: string;
  /** 1 for the first attempt. */
  attempt: number;
  maxAttempts: number;
  /** The lease epoch this attempt holds; every write about it is fenced by it. */
  epoch: number;
  /** Aborted when the attempt times out; stop work when it fires. */
  signal: AbortSignal;
  /**
   * Extends this attempt's lease for long work (default: the task's timeout
   * from now). Throws LeaseLostError when the attempt no longer owns the task.
   */
  heartbeat(extendSeconds?: number): Promise<void>;
  /**
   * The task's tenant's webhook signing secrets: current first, then the
   * previous one during a rotation's overlap; empty when signing is not
   * configured. Loaded once per consumer batch, on the first call.
   */
  signingSecrets(): Promise<string[]>;
  log: Logger;
  /** The W3C trace context the task was enqueued with (the http task sends a child of it). */
  trace?: TraceContext | null;
}

export interface TaskHandler<P = unknown> {
  type: string;
  payload: z.ZodType<P>;
  run(payload: P, ctx: TaskContext): Promise<unknown>;
}

export interface Registry {
  get(type: string): TaskHandler | undefined;
  types(): string[];
  /** Parses a payload for `type`; throws invalid_request naming `pathPrefix` + the field. */
  validate(type: string, payload: unknown, pathPrefix?: string): unknown;
}

export function createRegistry(handlers: readonly TaskHandler<never>[]): Registry {
  const byType = new Map<string, TaskHandler>();
  for (const h of handlers) {
    if (byType.has(h.type)) throw new Error(`task type ${h.type} is registered twice`);
    byType.set(h.type, h as unknown as TaskHandler);
  }
  return {
    get: (type) => byType.get(type),
    types: () => [...byType.keys()].sort(),
    validate(type, payload, pathPrefix = '') {
      const handler = byType.get(type);
      const at = (field: string) => (pathPrefix ? `${pathPrefix}.${field}` : field);
      if (!handler) {
        throw invalid(`unknown task type "${type}"`, [
          { path: at('task'), message: `unknown task type; registered: ${[...byType.keys()].sort().join(', ')}` },
        ]);
      }
      const parsed = handler.payload.safeParse(payload);
      if (!parsed.success) throw invalid(`invalid payload for task type "${type}"`, zodDetails(parsed.error.issues, at('payload')));
      return parsed.data;
    },
  };
}

/** Defines a handler with its payload type inferred from the schema. */
export function defineTask<S extends z.ZodType>(
  type: string,
  payload: S,
  run: (payload: z.output<S>, ctx: TaskContext) => Promise<unknown>,
): TaskHandler<never> {
  return { type, payload, run } as unknown as TaskHandler<never>;
}
