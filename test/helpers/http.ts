// Drives the real Hono app in Node over a real database (the workerd tests
// cover the Worker's wiring; these cover the API's behaviour in depth).
import { afterEach } from 'vitest';
import { defaultConfig, type Config } from '../../src/config.ts';
import type { Db } from '../../src/db/seam.ts';
import { taskTypes } from '../../functions/tasks.ts';
import { createRegistry, type TaskHandler } from '../../src/handlers/registry.ts';
import { createApp } from '../../src/http/app.ts';
import { silentLogger } from '../../src/log.ts';
import type { KeyCache } from '../../src/tenants/key-cache.ts';
import type { Kicker } from '../../src/sweep/kick.ts';
import { createSigningSecretStore } from '../../src/tenants/signing-secrets.ts';
import { createOutbox } from './harness.ts';
import { TEST_SIGNING_SECRET } from './secrets.ts';

/** At least 32 characters: a shorter ADMIN_TOKEN counts as unset. */
export const ADMIN_TOKEN = 'node-test-admin-token-of-at-least-32-characters';

// Every API's waitUntil'd work, settled after each test: a dispatch kick a
// test did not wait for (its trailing round runs up to KICK_INTERVAL_MS
// later) must not claim the next test's tasks after its tables were reset.
const unsettled = new Set<Promise<unknown>[]>();
afterEach(async () => {
  for (const pending of unsettled) await Promise.allSettled(pending.splice(0));
  unsettled.clear();
});

export interface Reply {
  status: number;
  body: any;
  headers: Headers;
}

export function createTestApi(
  db: Db,
  options: { config?: Partial<Config>; handlers?: TaskHandler<never>[]; keyCache?: KeyCache; kicker?: Kicker } = {},
) {
  const config: Config = { ...defaultConfig, ...options.config };
  const app = createApp({
    config,
    registry: createRegistry([...taskTypes({ config }), ...(options.handlers ?? [])]),
    log: silentLogger,
    adminToken: ADMIN_TOKEN,
    keyCache: options.keyCache,
    kicker: options.kicker,
    signingSecrets: createSigningSecretStore(TEST_SIGNING_SECRET),
  });
  const outbox = createOutbox();
  const pending: Promise<unknown>[] = [];
  unsettled.add(pending);
  let now: Date | undefined;
  async function call(
    method: string,
    path: string,
    init: { token?: string; tenant?: string; body?: unknown; raw?: string; headers?: Record<string, string> } = {},
  ): Promise<Reply> {
    const headers: Record<string, string> = { ...init.headers };
    if (init.token !== undefined) headers.authorization = `Bearer ${init.token}`;
    if (init.tenant !== undefined) headers['x-tenant'] = init.tenant;
    let body: string | undefined;
    if (init.raw !== undefined) body = init.raw;
    else if (init.body !== undefined) body = JSON.stringify(init.body);
    if (body !== undefined && headers['content-type'] === undefined) headers['content-type'] = 'application/json';
    const res = await app.request(`http://api.test${path}`, { method, headers, body }, {
      db,
      sender: outbox,
      waitUntil: (p) => pending.push(p),
      now,
    });
    const text = await res.text();
    let parsed: unknown = text;
    try {
      parsed = JSON.parse(text);
    } catch {
      // not JSON
    }
    return { status: res.status, body: parsed, headers: res.headers };
  }
  return {
    app,
    outbox,
    call,
    admin: (method: string, path: string, init: Parameters<typeof call>[2] = {}) => call(method, path, { token: ADMIN_TOKEN, ...init }),
    /** Sets the clock override every request passes down (undefined: the database's now()). */
    setNow(d: Date | undefined) {
      now = d;
    },
    /** Waits for the waitUntil'd work (e.g. the dispatch kick). */
    settle: () => Promise.allSettled(pending.splice(0)),
  };
}
