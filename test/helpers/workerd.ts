// What the workerd tests (test/worker/) share: requests to the Worker as the
// admin (the ADMIN_TOKEN binding, set in vitest.config.ts from
// test/helpers/secrets.ts), one sweep through the cron handler, waiting for a
// condition or a task's status, and what the test receiver was sent.
import { createExecutionContext, createScheduledController, waitOnExecutionContext } from 'cloudflare:test';
import { env, exports } from 'cloudflare:workers';
import worker, { type Env } from '../../functions/index.ts';

export const BASE = 'https://scheduler.test';

/** The admin's headers for a JSON request on behalf of `tenant`. */
export const adminHeaders = (tenant: string) => ({
  authorization: `Bearer ${env.ADMIN_TOKEN}`,
  'content-type': 'application/json',
  'x-tenant': tenant,
});

/** GET /v1/tasks/{id} of `tenant`, through the Worker. */
export async function getTask(id: string, tenant: string): Promise<any> {
  return (await exports.default.fetch(`${BASE}/v1/tasks/${id}`, { headers: adminHeaders(tenant) })).json();
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
export async function deliveries<T = any>(path: string): Promise<T[]> {
  return (await fetch(`${env.RECEIVER_URL}/_deliveries?path=${encodeURIComponent(path)}`)).json();
}
