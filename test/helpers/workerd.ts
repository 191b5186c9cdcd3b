// What the workerd tests (test/worker/) share: requests to the Worker as the
// admin (the ADMIN_TOKEN binding, set in vitest.config.ts from
// test/helpers/secrets.ts), the typed client over the Worker, one sweep
// through the cron handler, waiting for a condition or a task's status, and
// what the test receiver was sent.
import { createExecutionContext, createScheduledController, waitOnExecutionContext } from 'cloudflare:test';
import { env, exports } from 'cloudflare:workers';
import worker, { type Env } from '../../functions/index.ts';
import { createClient } from '../../packages/client/src/index.ts';
import type { Delivery } from '../setup/receiver.ts';
export type { Delivery };
import type { Reply } from './http.ts';

export const BASE = 'https://scheduler.test';

/** The admin's headers for a JSON request on behalf of `tenant`. */
export const adminHeaders = (tenant: string) => ({
  authorization: `Bearer ${env.ADMIN_TOKEN}`,
  'content-type': 'application/json',
  'x-tenant': tenant,
});

/**
 * One request to the Worker as the admin, acting as `tenant` (none: the
 * Worker's default tenant). `body` is sent as JSON, `raw` as is (hostile or
 * malformed input), both as application/json; `headers` are added last.
 * The answer must be JSON.
 */
export async function api(
  method: string,
  path: string,
  init: { tenant?: string; body?: unknown; raw?: string; headers?: Record<string, string> } = {},
): Promise<Reply> {
  const headers: Record<string, string> = { authorization: `Bearer ${env.ADMIN_TOKEN}` };
  if (init.tenant !== undefined) headers['x-tenant'] = init.tenant;
  const body = init.raw ?? (init.body === undefined ? undefined : JSON.stringify(init.body));
  if (body !== undefined) headers['content-type'] = 'application/json';
  const res = await exports.default.fetch(`${BASE}${path}`, { method, headers: { ...headers, ...init.headers }, body });
  return { status: res.status, body: await res.json(), headers: res.headers };
}

/** The typed client over the Worker, with `key` (default: the admin token) acting as `tenant`. */
export const workerClient = (options: { key?: string; tenant?: string } = {}) =>
  createClient({ baseUrl: BASE, key: options.key ?? env.ADMIN_TOKEN, tenant: options.tenant, fetch: (r) => exports.default.fetch(r) });

/** GET /v1/tasks/{id} of `tenant`, through the Worker. */
export async function getTask(id: string, tenant: string): Promise<any> {
  return (await api('GET', `/v1/tasks/${id}`, { tenant })).body;
}

/** `tenant`'s webhook signing secret (and the previous one during a rotation's overlap). */
export async function signingSecret(tenant: string): Promise<{ secret: string; previous?: { secret: string } }> {
  const r = await api('GET', '/v1/signing-secret', { tenant });
  if (r.status !== 200) throw new Error(`GET /v1/signing-secret answered ${r.status}: ${JSON.stringify(r.body)}`);
  return r.body;
}

/** Probes until `ok` holds or the time is up; returns the last value either way (the caller asserts). */
export async function until<T>(probe: () => Promise<T>, ok: (v: T) => boolean, timeoutMs = 20_000, everyMs = 100): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await probe();
    if (ok(v) || Date.now() > deadline) return v;
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

/** `until` with a sweep before each probe, as the ticker would run it: for retries and work that falls due later. */
export const sweepUntil = <T>(probe: () => Promise<T>, ok: (v: T) => boolean, timeoutMs = 20_000) =>
  until(
    async () => {
      await sweep();
      return probe();
    },
    ok,
    timeoutMs,
  );

/** The task once it has `status`, or as it is when the time is up. */
export const waitForStatus = (id: string, tenant: string, status: string, timeoutMs = 15_000) =>
  until(() => getTask(id, tenant), (t) => t.status === status, timeoutMs);

/** One run of the cron handler (a sweep), waited out. */
export async function sweep(): Promise<void> {
  const ctx = createExecutionContext();
  await worker.scheduled(createScheduledController({ cron: '* * * * *' }), env as unknown as Env, ctx);
  await waitOnExecutionContext(ctx);
}

/** The requests the test receiver (RECEIVER_URL) got on `path`, oldest first. */
export async function deliveries(path: string): Promise<Delivery[]> {
  return (await fetch(`${env.RECEIVER_URL}/_deliveries?path=${encodeURIComponent(path)}`)).json();
}
