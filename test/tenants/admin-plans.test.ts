// The admin's reads of keys and tenants (admin_reads_by_tenant, migration
// 0030), over 20,000 keys of 5,000 tenants: one tenant's keys, its only key
// the oldest of all, and the tenant picker's first page. Before the tenant
// indexes, the first walked every key newest first, the second read
// api_keys and tenants whole and sorted them. The plans as run (EXPLAIN
// ANALYZE, rolled back), generic and custom: no scan reads past what the
// answer needs.
import { beforeAll, describe, expect, it } from 'vitest';
import { listApiKeys, listKnownTenants } from '../../src/db/sql/tenants.ts';
import { createApiKey } from '../../src/tenants/keys.ts';
import { resetTables, useTestDatabase } from '../helpers/db.ts';
import { explainAsRun, expectReadsAtMost } from '../helpers/plans.ts';

const t = useTestDatabase();

describe('admin reads of keys and tenants by tenant', () => {
  const KEYS = 20_000;
  const TENANTS = 5_000; // four keys each
  const PAGE = 100;

  beforeAll(async () => {
    await resetTables(t.db);
    // The oldest key of all, its tenant's only one.
    await createApiKey(t.db, 'lonely');
    await t.db.query(
      `insert into api_keys (tenant, prefix, key_hash)
       select 'tenant-' || lpad((i % $2::int)::text, 5, '0'), 'bulk' || i, 'hash' || i from generate_series(1, $1::int) i`,
      [KEYS, TENANTS],
    );
    // Tenants with a fair-queuing row, most of them with keys too, some without (in both lists once).
    await t.db.query(
      `insert into tenants (queue, tenant)
       select q, 'tenant-' || lpad(i::text, 5, '0') from generate_series(0, $1::int - 1, 2) i, (values ('default'), ('mail')) v(q)
       union all select 'default', 'no-key-' || i from generate_series(1, 50) i`,
      [TENANTS],
    );
    await t.db.query('vacuum analyze api_keys');
    await t.db.query('vacuum analyze tenants');
  });

  for (const plan of ['generic', 'custom'] as const) {
    it(`one tenant's keys read that tenant's alone (${plan} plan)`, async () => {
      const { nodes } = await explainAsRun(t.db, (q) => listApiKeys(q, { tenant: 'lonely', limit: 200 }), plan);
      const scans = nodes.filter((n) => n['Relation Name'] === 'api_keys');
      expect(scans.length).toBeGreaterThan(0);
      expectReadsAtMost(scans, 1, `keys of one tenant (${plan})`);
    });

    it(`the tenant picker's first page reads about a page of each index (${plan} plan)`, async () => {
      const { nodes } = await explainAsRun(t.db, (q) => listKnownTenants(q, { limit: PAGE }), plan);
      const scans = nodes.filter((n) => n['Relation Name'] === 'api_keys' || n['Relation Name'] === 'tenants');
      expect(scans.length).toBe(2);
      // Four keys and two queue rows per tenant: a page of tenants is 400 keys and 200 rows at most.
      expectReadsAtMost(scans, 4 * PAGE + 4, `tenant picker (${plan})`);
    });
  }

  it('the answers: one tenant newest first; each tenant once, in order, with a key or a row', async () => {
    const lonely = await listApiKeys(t.db, { tenant: 'lonely', limit: 200 });
    expect(lonely.map((k) => k.tenant)).toEqual(['lonely']);
    const some = await listApiKeys(t.db, { tenant: 'tenant-00007', limit: 3 });
    expect(some.map((k) => k.tenant)).toEqual(['tenant-00007', 'tenant-00007', 'tenant-00007']);
    expect(some.map((k) => Number(k.id))).toEqual([...some.map((k) => Number(k.id))].sort((a, b) => b - a));
    const all = await listApiKeys(t.db, { limit: 2 });
    expect(all.map((k) => k.tenant)).toEqual(['tenant-00000', `tenant-${String((KEYS - 1) % TENANTS).padStart(5, '0')}`]);

    const picker = await listKnownTenants(t.db, { limit: 10_000 });
    expect(picker).toHaveLength(TENANTS + 51);
    expect(new Set(picker).size).toBe(picker.length);
    expect(picker).toEqual([...picker].sort());
    expect(picker.slice(0, 3)).toEqual(['lonely', 'no-key-1', 'no-key-10']);
    expect(await listKnownTenants(t.db, { limit: 2 })).toEqual(['lonely', 'no-key-1']);
  });
});
