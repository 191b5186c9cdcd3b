// Per-tenant signing secrets (issue 10, finding 1; S21): a tenant's delivery
// verifies with its own secret only, both secrets sign during a rotation's
// overlap and only the new one after it, secrets are stored encrypted, and the
// consumer loads them in one statement per batch.
import { Webhook } from 'standardwebhooks';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { countStatements } from '../../src/db/seam.ts';
import { findSigningSecrets } from '../../src/db/sql/signing-secrets.ts';
import { createSigningSecretStore } from '../../src/tenants/signing-secrets.ts';
import { at, resetTables, T0, useTestDatabase } from '../helpers/db.ts';
import { createHarness } from '../helpers/harness.ts';
import { TEST_SIGNING_SECRET } from '../helpers/secrets.ts';
import { createTestApi } from '../helpers/http.ts';
import { startReceiver } from '../setup/receiver.ts';

const t = useTestDatabase();
let receiver: Awaited<ReturnType<typeof startReceiver>>;
let api: ReturnType<typeof createTestApi>;

beforeAll(async () => {
  receiver = await startReceiver();
});
afterAll(async () => {
  await receiver.close();
});
beforeEach(async () => {
  await resetTables(t.db);
  api = createTestApi(t.db);
});

const secretOf = async (tenant: string, now?: Date) => {
  api.setNow(now);
  const r = await api.admin('GET', '/v1/signing-secret', { tenant });
  expect(r.status).toBe(200);
  return r.body as { secret: string; createdAt: string; previous?: { secret: string; expiresAt: string } };
};

const deliveries = async (path: string) =>
  (await (await fetch(`${receiver.url}/_deliveries?path=${encodeURIComponent(path)}`)).json()) as {
    headers: Record<string, string>;
    body: string;
  }[];

/** Enqueues one http task for `tenant` and runs it at `now`; returns what the receiver got. */
async function deliver(tenant: string, now: Date, harness = createHarness(t.db, { config: { allowPrivateTargets: true } })) {
  const path = `/hook/ok/${crypto.randomUUID()}`;
  await harness.enqueue({ task: 'http', payload: { url: `${receiver.url}${path}`, body: { tenant } } }, { tenant, now });
  await harness.drain({ now });
  const got = await deliveries(path);
  expect(got).toHaveLength(1);
  return got[0]!;
}

const verifies = (secret: string, d: { headers: Record<string, string>; body: string }) => {
  try {
    new Webhook(secret).verify(d.body, d.headers);
    return true;
  } catch {
    return false;
  }
};

describe('a signing secret per tenant', () => {
  it("A's delivery verifies with A's secret, not with B's nor with the Worker's SIGNING_SECRET", async () => {
    const a = await secretOf('tenant-a');
    const b = await secretOf('tenant-b');
    expect(a.secret).toMatch(/^whsec_[A-Za-z0-9+/]{43}=$/);
    expect(b.secret).not.toBe(a.secret);

    const d = await deliver('tenant-a', T0);
    expect(d.headers['webhook-signature']!.split(' ')).toHaveLength(1);
    expect(verifies(a.secret, d)).toBe(true);
    expect(verifies(b.secret, d)).toBe(false);
    expect(verifies(TEST_SIGNING_SECRET, d)).toBe(false);
  });

  it('is created by the first delivery when the tenant never read it, and the read then returns that one', async () => {
    const d = await deliver('fresh', T0);
    const { secret } = await secretOf('fresh');
    expect(verifies(secret, d)).toBe(true);
  });

  it('is stored encrypted, bound to its tenant', async () => {
    const { secret } = await secretOf('tenant-a');
    const [row] = await t.db.query<{ current_secret: string }>(`select current_secret from signing_secrets where tenant = 'tenant-a'`);
    expect(row!.current_secret).toMatch(/^v1:/);
    expect(row!.current_secret).not.toContain(secret);
    expect(row!.current_secret).not.toContain(secret.slice('whsec_'.length));
    // A's ciphertext copied into B's row does not let B sign as A: it fails to decrypt.
    await secretOf('tenant-b');
    await t.db.query(`update signing_secrets set current_secret = $1::text where tenant = 'tenant-b'`, [row!.current_secret]);
    const r = await api.admin('GET', '/v1/signing-secret', { tenant: 'tenant-b' });
    expect(r.status).toBe(500);
    expect(JSON.stringify(r.body)).not.toContain(secret);
  });

  it("a batch's read returns its own tenants' ciphertexts, never another tenant's", async () => {
    await secretOf('tenant-a');
    await secretOf('tenant-b');
    await secretOf('tenant-c');
    const rows = await findSigningSecrets(t.db, { tenants: ['tenant-a', 'tenant-c', 'tenant-none'] });
    expect(rows.map((r) => r.tenant).sort()).toEqual(['tenant-a', 'tenant-c']);
  });

  it('two creators racing make one secret', async () => {
    const store = createSigningSecretStore(TEST_SIGNING_SECRET);
    const dbs = await Promise.all(Array.from({ length: 4 }, () => t.open({ maxConnections: 5 })));
    const got = await Promise.all(Array.from({ length: 20 }, (_, i) => store.get(dbs[i % dbs.length]!, 'racer', T0)));
    expect(new Set(got.map((s) => s.current.secret)).size).toBe(1);
    expect(await t.db.query(`select 1 from signing_secrets where tenant = 'racer'`)).toHaveLength(1);
  });

  it('a tenant key reads its own tenant, whatever X-Tenant says', async () => {
    const key = (await api.admin('POST', '/v1/admin/keys', { body: { tenant: 'tenant-a' } })).body.key as string;
    const own = await api.call('GET', '/v1/signing-secret', { token: key, tenant: 'tenant-b' });
    expect(own.status).toBe(200);
    expect(own.body.secret).toBe((await secretOf('tenant-a')).secret);
    expect(own.headers.get('cache-control')).toBe('no-store');
    expect((await api.call('GET', '/v1/signing-secret')).status).toBe(401);
  });
});

describe('rotation', () => {
  it('signs with both secrets during the overlap, then only with the new one', async () => {
    const old = await secretOf('tenant-a', T0);
    api.setNow(at(10));
    const rotated = await api.admin('POST', '/v1/signing-secret/rotate', { tenant: 'tenant-a', body: { rotationOverlapSeconds: 3600 } });
    expect(rotated.status).toBe(200);
    expect(rotated.body.secret).not.toBe(old.secret);
    expect(rotated.body.previous).toEqual({ secret: old.secret, expiresAt: at(3610).toISOString() });
    expect(await secretOf('tenant-a', at(20))).toEqual(rotated.body);

    const during = await deliver('tenant-a', at(30));
    expect(during.headers['webhook-signature']!.split(' ')).toHaveLength(2);
    expect(verifies(old.secret, during)).toBe(true);
    expect(verifies(rotated.body.secret, during)).toBe(true);

    const after = await deliver('tenant-a', at(3611));
    expect(after.headers['webhook-signature']!.split(' ')).toHaveLength(1);
    expect(verifies(rotated.body.secret, after)).toBe(true);
    expect(verifies(old.secret, after)).toBe(false);
    expect(await secretOf('tenant-a', at(3611))).toEqual({ secret: rotated.body.secret, createdAt: rotated.body.createdAt });
  });

  it('without a body the overlap is a day; 0 replaces the secret at once', async () => {
    await secretOf('tenant-a', T0);
    api.setNow(T0);
    const byDefault = await api.admin('POST', '/v1/signing-secret/rotate', { tenant: 'tenant-a' });
    expect(byDefault.status).toBe(200);
    expect(byDefault.body.previous.expiresAt).toBe(at(86_400).toISOString());

    const atOnce = await api.admin('POST', '/v1/signing-secret/rotate', { tenant: 'tenant-a', body: { rotationOverlapSeconds: 0 } });
    expect(atOnce.status).toBe(200);
    expect(atOnce.body.previous).toBeUndefined();
    const d = await deliver('tenant-a', at(1));
    expect(verifies(atOnce.body.secret, d)).toBe(true);
    expect(verifies(byDefault.body.secret, d)).toBe(false);
  });

  it('refuses a bad overlap naming the field, and changes nothing', async () => {
    const before = await secretOf('tenant-a');
    for (const body of [{ rotationOverlapSeconds: -1 }, { rotationOverlapSeconds: 1.5 }, { rotationOverlapSeconds: '60' }, { rotationOverlapSeconds: 10 ** 9 }]) {
      const r = await api.admin('POST', '/v1/signing-secret/rotate', { tenant: 'tenant-a', body });
      expect(r.status, JSON.stringify(body)).toBe(400);
      expect(r.body.error.details[0].path).toBe('rotationOverlapSeconds');
    }
    const unknown = await api.admin('POST', '/v1/signing-secret/rotate', { tenant: 'tenant-a', body: { overlap: 5 } });
    expect(unknown.status).toBe(400);
    expect(unknown.body.error.details[0].path).toBe('overlap');
    expect(await secretOf('tenant-a')).toEqual(before);
  });
});

describe('the consumer', () => {
  it("loads a batch's secrets in one statement (two when some are created), never per task", async () => {
    const counted = countStatements(t.db);
    const harness = createHarness(counted.db, { config: { allowPrivateTargets: true } });
    const enqueueMany = async () => {
      for (const tenant of ['t1', 't2', 't3']) {
        await harness.enqueue(
          Array.from({ length: 5 }, () => ({ task: 'http', payload: { url: `${receiver.url}/hook/ok/${tenant}` } })),
          { tenant, now: T0 },
        );
      }
      await harness.sweep({ now: T0 });
      return harness.outbox.take().map((m) => m.body);
    };
    await secretOf('t1');
    counted.reset();
    const first = await harness.consume(await enqueueMany(), { now: T0 });
    expect(first.results.map((r) => r.status)).toEqual(Array(15).fill('succeeded'));
    expect(counted.counts.byName.signing_secrets_find).toBe(1);
    expect(counted.counts.byName.signing_secrets_insert_missing).toBe(1);

    const sent = await enqueueMany();
    counted.reset();
    await harness.consume(sent, { now: T0 });
    expect(counted.counts.byName.signing_secrets_find).toBe(1);
    expect(counted.counts.byName.signing_secrets_insert_missing).toBeUndefined();
  });

  it('a batch without http tasks reads no secrets', async () => {
    const counted = countStatements(t.db);
    const harness = createHarness(counted.db);
    await harness.enqueue([{ task: 'noop' }, { task: 'noop' }], { now: T0 });
    await harness.sweep({ now: T0 });
    counted.reset();
    await harness.consume(harness.outbox.take().map((m) => m.body), { now: T0 });
    expect(counted.counts.byName.signing_secrets_find).toBeUndefined();
  });
});

describe('configuration', () => {
  it('refuses a key-encryption key shorter than 32 characters', () => {
    expect(() => createSigningSecretStore('whsec_short')).toThrow(TypeError);
    expect(createSigningSecretStore(undefined).configured).toBe(false);
  });

  it('a different SIGNING_SECRET cannot decrypt: the delivery fails and retries, naming no secret', async () => {
    const { secret } = await secretOf('tenant-a');
    const other = createSigningSecretStore(`whsec_${btoa('another key-encryption key, 32 bytes')}`);
    await expect(other.get(t.db, 'tenant-a')).rejects.toThrow(/cannot be decrypted/);
    const error = await other.get(t.db, 'tenant-a').catch((e: Error) => e);
    expect(String(error)).not.toContain(secret);
  });
});
