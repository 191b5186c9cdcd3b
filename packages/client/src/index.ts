// The typed client for edge apps: Workers, Pages functions, Node backends.
// It needs only `fetch` and has no dependencies. Request and response types
// are plain TypeScript (./types.ts), kept equal to the server's zod schemas by
// a type-level check, and every error response becomes an ApiError carrying
// `code`, `status` and `details`.
//
//   import { createClient } from 'edge-scheduler-client';
//   const scheduler = createClient({ baseUrl: 'https://scheduler.example.workers.dev', key: env.SCHEDULER_KEY });
//   await scheduler.tasks.enqueue({ task: 'http', payload: { url: 'https://example.com/hook' }, delay: 600 });
import type {
  ApiKey,
  BulkCancelInput,
  BulkReplayInput,
  QueueStats,
  ReplayInput,
  Schedule,
  ScheduleInput,
  SigningSecret,
  SpentTask,
  Task,
  TaskInput,
  TaskStatus,
  Attempt,
  MinuteStats,
  ConcurrencySlot,
  RateLimitState,
} from './types.ts';

export type * from './types.ts';

export interface BulkResult {
  affected: number;
  /** The tasks acted on, ascending; calling again with the same filter continues after them. */
  ids: string[];
}
export interface BulkReplayResult extends BulkResult {
  /** The replays (new tasks), in the order of `ids`. */
  replayIds: string[];
}

export interface TaskListQuery {
  queue?: string;
  status?: TaskStatus | TaskStatus[];
  task?: string;
  createdAfter?: Date | string;
  createdBefore?: Date | string;
  limit?: number;
  cursor?: string;
}
export interface Page<T> {
  items: T[];
  nextCursor: string | null;
}

export interface ErrorDetail {
  path: string;
  message: string;
}

/** An error response of the API (4xx or 5xx), or a response that was not the API's. */
export class ApiError extends Error {
  readonly status: number;
  readonly code: string;
  readonly details: ErrorDetail[];
  readonly requestId: string | null;
  constructor(status: number, code: string, message: string, details: ErrorDetail[] = [], requestId: string | null = null) {
    super(message);
    this.name = 'ApiError';
    this.status = status;
    this.code = code;
    this.details = details;
    this.requestId = requestId;
  }
}

export interface ClientOptions {
  /** The Worker's URL, e.g. `https://scheduler.example.workers.dev`. */
  baseUrl: string;
  /** A tenant key (`edsk_...`), or the admin token. */
  key: string;
  /** With the admin token on tenant routes: the tenant to act as. */
  tenant?: string;
  /** Defaults to the global fetch; pass a service binding's fetch inside Workers. */
  fetch?: (request: Request) => Promise<Response>;
}

type Query = Record<string, string | number | boolean | Date | string[] | undefined>;

function queryString(q: Query | undefined): string {
  const params = new URLSearchParams();
  for (const [k, v] of Object.entries(q ?? {})) {
    if (v === undefined) continue;
    params.set(k, v instanceof Date ? v.toISOString() : Array.isArray(v) ? v.join(',') : String(v));
  }
  const s = params.toString();
  return s ? `?${s}` : '';
}

export function createClient(options: ClientOptions) {
  const base = options.baseUrl.replace(/\/+$/, '');
  const doFetch = options.fetch ?? ((r: Request) => fetch(r));

  async function call<T>(method: string, path: string, init: { body?: unknown; query?: Query } = {}): Promise<{ status: number; body: T }> {
    const headers: Record<string, string> = { authorization: `Bearer ${options.key}`, accept: 'application/json' };
    if (options.tenant) headers['x-tenant'] = options.tenant;
    if (init.body !== undefined) headers['content-type'] = 'application/json';
    const res = await doFetch(
      new Request(`${base}${path}${queryString(init.query)}`, {
        method,
        headers,
        body: init.body === undefined ? undefined : JSON.stringify(init.body),
      }),
    );
    const text = await res.text();
    let parsed: unknown;
    try {
      parsed = text ? JSON.parse(text) : undefined;
    } catch {
      parsed = undefined;
    }
    if (!res.ok) {
      const e = (parsed as { error?: { code?: string; message?: string; details?: ErrorDetail[] } } | undefined)?.error;
      throw new ApiError(
        res.status,
        e?.code ?? 'http_error',
        e?.message ?? `HTTP ${res.status}: ${text.slice(0, 200)}`,
        e?.details ?? [],
        res.headers.get('x-request-id'),
      );
    }
    return { status: res.status, body: parsed as T };
  }
  const seg = encodeURIComponent;

  const tasks = {
    /** 201 when created; an existing idempotency key reschedules (still waiting) or returns the spent task (`deduplicated`). */
    enqueue: async (input: TaskInput) => (await call<Task | SpentTask>('POST', '/v1/tasks', { body: input })).body,
    /** Up to 1,000 tasks in one round trip, validated all or nothing; results in input order. */
    batch: async (inputs: TaskInput[]) => (await call<{ tasks: (Task | SpentTask)[] }>('POST', '/v1/tasks/batch', { body: { tasks: inputs } })).body.tasks,
    get: async (id: string) => (await call<Task>('GET', `/v1/tasks/${seg(id)}`)).body,
    list: async (query: TaskListQuery = {}): Promise<Page<Task>> => {
      const r = await call<{ tasks: Task[]; nextCursor: string | null }>('GET', '/v1/tasks', { query: { ...query } });
      return { items: r.body.tasks, nextCursor: r.body.nextCursor };
    },
    /** Every task matching the query, page after page. */
    async *iterate(query: Omit<TaskListQuery, 'cursor'> = {}): AsyncGenerator<Task> {
      let cursor: string | undefined;
      do {
        const page = await tasks.list({ ...query, cursor });
        yield* page.items;
        cursor = page.nextCursor ?? undefined;
      } while (cursor);
    },
    /** Cancels a task that has not started (409 once it has). */
    cancel: async (id: string) => (await call<Task>('DELETE', `/v1/tasks/${seg(id)}`)).body,
    cancelByKey: async (idempotencyKey: string) => (await call<Task>('DELETE', `/v1/tasks/by-key/${seg(idempotencyKey)}`)).body,
    /**
     * Replays a finished task as a new task (`replayOf` names the original); `created` is false when it
     * had been replayed already (a task has at most one replay): the existing replay comes back.
     */
    replay: async (id: string, input: ReplayInput = {}) => {
      const r = await call<Task>('POST', `/v1/tasks/${seg(id)}/replay`, { body: input });
      return { task: r.body, created: r.status === 201 };
    },
    /** The task's attempts, oldest first: outcome, times, error, and (http tasks) the response status. */
    attempts: async (id: string) => (await call<{ attempts: Attempt[] }>('GET', `/v1/tasks/${seg(id)}/attempts`)).body.attempts,
    /** Cancels up to `limit` matching tasks that have not started. */
    bulkCancel: async (input: BulkCancelInput) => (await call<BulkResult>('POST', '/v1/tasks/bulk-cancel', { body: input })).body,
    /** Replays up to `limit` matching finished tasks that have no replay yet. */
    bulkReplay: async (input: BulkReplayInput) => (await call<BulkReplayResult>('POST', '/v1/tasks/bulk-replay', { body: input })).body,
  };

  const schedules = {
    /** Creates or replaces; `created` tells which. */
    put: async (name: string, input: ScheduleInput) => {
      const r = await call<Schedule>('PUT', `/v1/schedules/${seg(name)}`, { body: input });
      return { schedule: r.body, created: r.status === 201 };
    },
    get: async (name: string) => (await call<Schedule>('GET', `/v1/schedules/${seg(name)}`)).body,
    list: async (query: { limit?: number; cursor?: string } = {}): Promise<Page<Schedule>> => {
      const r = await call<{ schedules: Schedule[]; nextCursor: string | null }>('GET', '/v1/schedules', { query });
      return { items: r.body.schedules, nextCursor: r.body.nextCursor };
    },
    async *iterate(): AsyncGenerator<Schedule> {
      let cursor: string | undefined;
      do {
        const page = await schedules.list({ cursor });
        yield* page.items;
        cursor = page.nextCursor ?? undefined;
      } while (cursor);
    },
    delete: async (name: string) => (await call<Schedule>('DELETE', `/v1/schedules/${seg(name)}`)).body,
    pause: async (name: string) => (await call<Schedule>('POST', `/v1/schedules/${seg(name)}/pause`)).body,
    resume: async (name: string) => (await call<Schedule>('POST', `/v1/schedules/${seg(name)}/resume`)).body,
    /** Runs the schedule now (paused or not): the occurrence, due now; its next fire time stays. */
    trigger: async (name: string) => (await call<Task>('POST', `/v1/schedules/${seg(name)}/trigger`)).body,
    next: async (name: string, count?: number) =>
      (await call<{ times: string[] }>('GET', `/v1/schedules/${seg(name)}/next`, { query: { count } })).body.times,
    runs: async (name: string, query: { status?: TaskStatus | TaskStatus[]; limit?: number; cursor?: string } = {}): Promise<Page<Task>> => {
      const r = await call<{ tasks: Task[]; nextCursor: string | null }>('GET', `/v1/schedules/${seg(name)}/runs`, { query });
      return { items: r.body.tasks, nextCursor: r.body.nextCursor };
    },
  };

  const queues = {
    list: async () => (await call<{ queues: QueueStats[] }>('GET', '/v1/queues')).body.queues,
  };

  /** Flow control: a concurrency key's running count, limit and waiting tasks (ApiError 404 for an unknown key). */
  const concurrency = {
    get: async (key: string) => (await call<ConcurrencySlot>('GET', `/v1/concurrency/${seg(key)}`)).body,
  };

  /** Flow control: a rate-limited key's limit, next allowed start and waiting tasks (ApiError 404 until one of its tasks was claimed). */
  const rateLimits = {
    get: async (key: string) => (await call<RateLimitState>('GET', `/v1/rate-limits/${seg(key)}`)).body,
  };

  const stats = {
    /** Per queue and minute over the last `minutes` (default 60): finished by outcome, due-to-start p50/p99. */
    finished: async (minutes?: number) =>
      (await call<{ minutes: MinuteStats[] }>('GET', '/v1/stats/finished', { query: { minutes } })).body.minutes,
  };

  /** Needs the admin token as `key`. */
  const admin = {
    listTenants: async () => (await call<{ tenants: string[] }>('GET', '/v1/admin/tenants')).body.tenants,
    listKeys: async (query: { tenant?: string; limit?: number } = {}) =>
      (await call<{ keys: ApiKey[] }>('GET', '/v1/admin/keys', { query })).body.keys,
    createKey: async (tenant: string) => (await call<ApiKey & { key: string }>('POST', '/v1/admin/keys', { body: { tenant } })).body,
    revokeKey: async (id: string) => (await call<ApiKey>('DELETE', `/v1/admin/keys/${seg(id)}`)).body,
    setTenantWeight: async (tenant: string, weight: number, queue = 'default') =>
      (await call<{ tenant: string; queue: string; weight: number }>('PUT', `/v1/admin/tenants/${seg(tenant)}`, { body: { queue, weight } })).body,
    setQueuePaused: async (queue: string, paused: boolean) =>
      (await call<{ name: string; paused: boolean }>('PUT', `/v1/admin/queues/${seg(queue)}`, { body: { paused } })).body,
  };

  /** The tenant's webhook signing secret: verify deliveries with `secret` (and `previous.secret` during a rotation). */
  const signingSecret = {
    /** Created on first read. */
    get: async () => (await call<SigningSecret>('GET', '/v1/signing-secret')).body,
    /** A new secret; the old one keeps signing for `rotationOverlapSeconds` (default a day; 0: at once). */
    rotate: async (rotationOverlapSeconds?: number) =>
      (await call<SigningSecret>('POST', '/v1/signing-secret/rotate', { body: rotationOverlapSeconds === undefined ? {} : { rotationOverlapSeconds } }))
        .body,
  };

  const health = async () => (await call<{ ok: boolean }>('GET', '/healthz')).body;

  return { tasks, schedules, queues, concurrency, rateLimits, signingSecret, stats, admin, health };
}

export type Client = ReturnType<typeof createClient>;

export { verifyWebhook, WebhookVerificationError } from './webhooks.ts';
export type { WebhookBody, WebhookHeaderSource } from './webhooks.ts';
