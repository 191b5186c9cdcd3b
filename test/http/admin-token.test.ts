// An ADMIN_TOKEN shorter than 32 characters counts as unset (issue 10,
// finding 7): admin access is disabled and one warning is logged.
import { describe, expect, it } from 'vitest';
import { taskTypes } from '../../functions/tasks.ts';
import { defaultConfig } from '../../src/config.ts';
import { createRegistry } from '../../src/handlers/registry.ts';
import { createApp } from '../../src/http/app.ts';
import { createSigningSecretStore } from '../../src/tenants/signing-secrets.ts';
import { useTestDatabase } from '../helpers/db.ts';
import { captureLogs, createOutbox } from '../helpers/harness.ts';
import { TEST_SIGNING_SECRET } from '../helpers/secrets.ts';
import { ADMIN_TOKEN } from '../helpers/http.ts';

const t = useTestDatabase();

function appWith(adminToken: string) {
  const { log, lines } = captureLogs();
  const app = createApp({
    config: defaultConfig,
    registry: createRegistry(taskTypes({ config: defaultConfig })),
    log,
    adminToken,
    signingSecrets: createSigningSecretStore(TEST_SIGNING_SECRET),
  });
  const call = (path: string, token: string, init: RequestInit = {}) =>
    app.request(`http://api.test${path}`, { ...init, headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' } }, {
      db: t.db,
      sender: createOutbox(),
      waitUntil: () => {},
    });
  return { call, lines };
}

describe('ADMIN_TOKEN', () => {
  it('shorter than 32 characters disables admin access, with one warning', async () => {
    const short = 'x'.repeat(31);
    const { call, lines } = appWith(short);
    for (let i = 0; i < 3; i++) {
      expect((await call('/v1/admin/keys', short, { method: 'POST', body: JSON.stringify({ tenant: 'acme' }) })).status).toBe(401);
      expect((await call('/v1/tasks', short)).status).toBe(401);
    }
    const warnings = lines.filter((l) => l.level === 'warn' && /ADMIN_TOKEN/.test(l.msg));
    expect(warnings).toHaveLength(1);
    expect(JSON.stringify(warnings)).not.toContain(short);
    expect(await t.db.query('select 1 from api_keys')).toEqual([]);
  });

  it('of 32 characters or more works, without a warning', async () => {
    const long = 'y'.repeat(32);
    const { call, lines } = appWith(long);
    expect((await call('/v1/admin/keys', long, { method: 'POST', body: JSON.stringify({ tenant: 'acme' }) })).status).toBe(201);
    expect((await call('/v1/tasks', long)).status).toBe(200);
    expect(lines.filter((l) => l.level === 'warn')).toEqual([]);
    expect(ADMIN_TOKEN.length).toBeGreaterThanOrEqual(32);
  });
});
