-- 0030: the admin's reads of keys and tenants by tenant.
--
-- Two admin reads had no index in their order but the primary keys:
-- - `GET /v1/admin/api-keys?tenant=...` (api_keys_list_of_tenant) walked
--   every key newest first to find one tenant's: 7.5-18 ms at 20,000 keys,
--   more for a tenant whose keys are all old;
-- - `GET /v1/admin/tenants` (tenants_list_known, the dashboard's tenant
--   picker) read api_keys and tenants whole, then hashed and sorted them:
--   15-41 ms at 20,000 keys.
-- Now each reads its index in order and stops at its limit (0.1-0.3 ms).
--
-- api_keys is written once per key (and once when revoked), tenants once per
-- (queue, tenant) and then only in last_vtime and weight, which no index
-- holds: the enqueue's update of its tenant row stays HOT.
--
-- `if not exists`: on a large table, build them first by hand with
-- `create index concurrently` under these names (see 0029).
create index if not exists api_keys_tenant_idx on api_keys (tenant, id);
create index if not exists tenants_tenant_idx on tenants (tenant);
