// Tenant keys: created by the admin, shown once, stored as a hash, revoked at
// once; every bad key is the same 401 that reveals nothing.
import { beforeAll, describe, expect, it } from 'vitest';
import { useTestDatabase } from '../helpers/db.ts';
import { createTestApi } from '../helpers/http.ts';

const t = useTestDatabase();
let api: ReturnType<typeof createTestApi>;
beforeAll(async () => {
  api = createTestApi(t.db);
});

describe('API keys', () => {
  it('a created key is typed, shown once, stored only as a hash, and scopes calls to its tenant', async () => {
    const created = await api.admin('POST', '/v1/admin/keys', { body: { tenant: 'acme' } });
    expect(created.status).toBe(201);
    const { key, id, prefix } = created.body;
    expect(key).toMatch(/^edsk_[a-z2-9]{12}_[A-Za-z0-9_-]{43}$/);
    expect(key.startsWith(`edsk_${prefix}_`)).toBe(true);
    const stored = await t.db.query<Record<string, unknown>>('select * from api_keys where id = $1', [id]);
    expect(JSON.stringify(stored)).not.toContain(key.slice(`edsk_${prefix}_`.length));
    expect(stored[0]!.key_hash).toMatch(/^[0-9a-f]{64}$/);

    const enq = await api.call('POST', '/v1/tasks', { token: key, body: { task: 'noop', delay: 60 } });
    expect(enq.status).toBe(201);
    const row = await t.db.query<{ tenant: string }>('select tenant from tasks where id = $1', [enq.body.id]);
    expect(row[0]!.tenant).toBe('acme');
    // X-Tenant is ignored for tenant keys: the key decides.
    const spoof = await api.call('GET', `/v1/tasks/${enq.body.id}`, { token: key, tenant: 'other' });
    expect(spoof.status).toBe(200);
  });

  it('a revoked key stops working at once', async () => {
    const { body } = await api.admin('POST', '/v1/admin/keys', { body: { tenant: 'acme' } });
    expect((await api.call('GET', '/v1/queues', { token: body.key })).status).toBe(200);
    const revoked = await api.admin('DELETE', `/v1/admin/keys/${body.id}`);
    expect(revoked.status).toBe(200);
    expect(revoked.body.revokedAt).not.toBeNull();
    expect(revoked.body.key).toBeUndefined();
    expect((await api.call('GET', '/v1/queues', { token: body.key })).status).toBe(401);
    expect((await api.admin('DELETE', '/v1/admin/keys/99999999')).status).toBe(404);
  });

  it('missing, malformed, unknown and revoked keys get the same 401', async () => {
    const { body: live } = await api.admin('POST', '/v1/admin/keys', { body: { tenant: 'acme' } });
    const { body: dead } = await api.admin('POST', '/v1/admin/keys', { body: { tenant: 'acme' } });
    await api.admin('DELETE', `/v1/admin/keys/${dead.id}`);
    const forged = `${live.key.slice(0, -4)}AAAA`; // right prefix, wrong secret
    const attempts = [
      await api.call('GET', '/v1/queues'),
      await api.call('GET', '/v1/queues', { headers: { authorization: 'Basic abc' } }),
      await api.call('GET', '/v1/queues', { token: 'edsk_short' }),
      await api.call('GET', '/v1/queues', { token: 'edsk_aaaaaaaaaaaa_' + 'A'.repeat(43) }),
      await api.call('GET', '/v1/queues', { token: forged }),
      await api.call('GET', '/v1/queues', { token: dead.key }),
    ];
    for (const r of attempts) {
      expect(r.status).toBe(401);
      expect(r.body).toEqual({ error: { code: 'unauthorized', message: 'missing or invalid API key' } });
    }
  });

  it('admin routes take only the admin token', async () => {
    const { body } = await api.admin('POST', '/v1/admin/keys', { body: { tenant: 'acme' } });
    expect((await api.call('POST', '/v1/admin/keys', { token: body.key, body: { tenant: 'acme' } })).status).toBe(401);
    expect((await api.call('PUT', '/v1/admin/queues/default', { token: body.key, body: { paused: true } })).status).toBe(401);
    const bad = await api.admin('POST', '/v1/admin/keys', { body: { tenant: 'no spaces allowed' } });
    expect(bad.status).toBe(400);
    expect(bad.body.error.details[0].path).toBe('tenant');
  });
});
