// One round trip per enqueue, get, cancel and reschedule with a tenant key:
// the key check is cached per isolate for at most KEY_CACHE_SECONDS (<= 5 s).
// A revoked key stops working within that bound; a cached key still scopes
// every call to its own tenant.
import { beforeEach, describe, expect, it } from 'vitest';
import { countStatements } from '../../src/db/seam.ts';
import { createPgDb } from '../../src/db/pg.ts';
import { createKeyCache, MAX_KEY_CACHE_MS } from '../../src/tenants/key-cache.ts';
import { resetTables, useTestDatabase } from '../helpers/db.ts';
import { createTestApi } from '../helpers/http.ts';

const t = useTestDatabase();
let clock = 0;
const tick = (ms: number) => {
  clock += ms;
};

beforeEach(async () => {
  await resetTables(t.db);
  clock = 1_000_000;
});

async function newKey(api: ReturnType<typeof createTestApi>, tenant: string) {
  const r = await api.admin('POST', '/v1/admin/keys', { body: { tenant } });
  expect(r.status).toBe(201);
  return r.body as { key: string; id: string };
}

describe('the per-isolate key cache', () => {
  it('enqueue, get, reschedule and cancel with a checked key are one round trip each', async () => {
    const counted = countStatements(t.db);
    const api = createTestApi(counted.db, { keyCache: createKeyCache({ ttlMs: 5_000, clock: () => clock }) });
    const { key } = await newKey(api, 'acme');
    expect((await api.call('GET', '/v1/queues', { token: key })).status).toBe(200); // the first use checks the key

    const perRoute: Record<string, { roundTrips: number; byName: Record<string, number> }> = {};
    const measure = async (route: string, run: () => Promise<{ status: number; body: any }>) => {
      counted.reset();
      const r = await run();
      perRoute[route] = { roundTrips: counted.counts.roundTrips, byName: { ...counted.counts.byName } };
      return r;
    };
    const created = await measure('enqueue', () =>
      api.call('POST', '/v1/tasks', { token: key, body: { task: 'noop', delay: 3600, idempotencyKey: 'k1' } }),
    );
    expect(created.status).toBe(201);
    await measure('get', () => api.call('GET', `/v1/tasks/${created.body.id}`, { token: key }));
    const moved = await measure('reschedule', () =>
      api.call('POST', '/v1/tasks', { token: key, body: { task: 'noop', delay: 7200, idempotencyKey: 'k1' } }),
    );
    expect(moved.status).toBe(200);
    const cancelled = await measure('cancel', () => api.call('DELETE', `/v1/tasks/${created.body.id}`, { token: key }));
    expect(cancelled.body.status).toBe('cancelled');
    for (const [route, c] of Object.entries(perRoute)) {
      expect({ route, roundTrips: c.roundTrips, keyChecks: c.byName.api_keys_find_live ?? 0 }).toEqual({ route, roundTrips: 1, keyChecks: 0 });
    }
  });

  it(`a revoked key stops working within the bound (${MAX_KEY_CACHE_MS / 1000} s) in an isolate that did not revoke it`, async () => {
    const cache = createKeyCache({ ttlMs: 5_000, clock: () => clock });
    const isolateA = createTestApi(t.db, { keyCache: cache });
    const isolateB = createTestApi(t.db, { keyCache: createKeyCache({ ttlMs: 5_000, clock: () => clock }) });
    const { key, id } = await newKey(isolateA, 'acme');
    expect((await isolateA.call('GET', '/v1/queues', { token: key })).status).toBe(200);
    expect((await isolateB.admin('DELETE', `/v1/admin/keys/${id}`)).status).toBe(200);
    // Within the bound the isolate that checked it may still trust it...
    tick(4_999);
    expect((await isolateA.call('GET', '/v1/queues', { token: key })).status).toBe(200);
    // ...and never past it.
    tick(1);
    expect((await isolateA.call('GET', '/v1/queues', { token: key })).status).toBe(401);
    tick(60_000);
    expect((await isolateA.call('GET', '/v1/queues', { token: key })).status).toBe(401);
  });

  it('the isolate that revokes a key stops trusting it at once', async () => {
    const api = createTestApi(t.db, { keyCache: createKeyCache({ ttlMs: 5_000, clock: () => clock }) });
    const { key, id } = await newKey(api, 'acme');
    expect((await api.call('GET', '/v1/queues', { token: key })).status).toBe(200);
    expect((await api.admin('DELETE', `/v1/admin/keys/${id}`)).status).toBe(200);
    expect((await api.call('GET', '/v1/queues', { token: key })).status).toBe(401);
  });

  it('a bound above 5 s is clamped to 5 s', async () => {
    const api = createTestApi(t.db, { keyCache: createKeyCache({ ttlMs: 3_600_000, clock: () => clock }) });
    const other = createTestApi(t.db);
    const { key, id } = await newKey(api, 'acme');
    expect((await api.call('GET', '/v1/queues', { token: key })).status).toBe(200);
    expect((await other.admin('DELETE', `/v1/admin/keys/${id}`)).status).toBe(200);
    tick(5_000);
    expect((await api.call('GET', '/v1/queues', { token: key })).status).toBe(401);
  });

  it('a cached key cannot reach another tenant: not by id, not by key, not by X-Tenant', async () => {
    const api = createTestApi(t.db, { keyCache: createKeyCache({ ttlMs: 5_000, clock: () => clock }) });
    const a = await newKey(api, 'tenant-a');
    const b = await newKey(api, 'tenant-b');
    const bTask = await api.call('POST', '/v1/tasks', { token: b.key, body: { task: 'noop', delay: 3600, idempotencyKey: 'shared' } });
    expect(bTask.status).toBe(201);
    // Both keys are now cached.
    expect((await api.call('GET', `/v1/tasks/${bTask.body.id}`, { token: b.key })).status).toBe(200);
    expect((await api.call('GET', '/v1/queues', { token: a.key })).status).toBe(200);
    expect((await api.call('GET', `/v1/tasks/${bTask.body.id}`, { token: a.key })).status).toBe(404);
    expect((await api.call('GET', `/v1/tasks/${bTask.body.id}`, { token: a.key, tenant: 'tenant-b' })).status).toBe(404);
    expect((await api.call('DELETE', `/v1/tasks/${bTask.body.id}`, { token: a.key })).status).toBe(404);
    expect((await api.call('DELETE', '/v1/tasks/by-key/shared', { token: a.key })).status).toBe(404);
    const listed = await api.call('GET', '/v1/tasks', { token: a.key, tenant: 'tenant-b' });
    expect(listed.body.tasks).toEqual([]);
    const still = await t.db.query<{ status: string }>('select status from tasks where id = $1::bigint', [bTask.body.id]);
    expect(still[0]!.status).toBe('scheduled');
    // A key that differs by one character is not a cache hit.
    const forged = a.key.slice(0, -1) + (a.key.endsWith('A') ? 'B' : 'A');
    expect((await api.call('GET', '/v1/queues', { token: forged })).status).toBe(401);
  });

  it('keeps a bounded number of keys', async () => {
    const cache = createKeyCache({ ttlMs: 5_000, maxEntries: 3, clock: () => clock });
    const api = createTestApi(t.db, { keyCache: cache });
    for (let i = 0; i < 5; i++) {
      const { key } = await newKey(api, `t${i}`);
      expect((await api.call('GET', '/v1/queues', { token: key })).status).toBe(200);
    }
    expect(cache.size).toBe(3);
  });
});

describe('round trips counted at the seam, connection set-up included', () => {
  it('a request on a fresh Hyperdrive-path Db costs one connection and one statement', async () => {
    const u = new URL(t.url);
    if (!u.password) u.password = 'unused';
    const db = createPgDb({ connectionString: u.toString() });
    try {
      const counted = countStatements(db);
      const api = createTestApi(counted.db);
      const r = await api.admin('POST', '/v1/tasks', { tenant: 'acme', body: { task: 'noop', delay: 3600 } });
      expect(r.status).toBe(201);
      expect({ connects: counted.counts.connects, roundTrips: counted.counts.roundTrips }).toEqual({ connects: 1, roundTrips: 1 });
    } finally {
      await db.close();
    }
  });
});

describe('without the cache (KEY_CACHE_SECONDS=0)', () => {
  it('an enqueue checks its key once: two round trips, not three', async () => {
    const counted = countStatements(t.db);
    const api = createTestApi(counted.db, { keyCache: createKeyCache({ ttlMs: 0 }) });
    const { key } = await newKey(api, 'acme');
    counted.reset();
    expect((await api.call('POST', '/v1/tasks', { token: key, body: { task: 'noop', delay: 3600 } })).status).toBe(201);
    expect(counted.counts.byName).toEqual({ api_keys_find_live: 1, tasks_insert_batch_plain: 1 });
  });
});
