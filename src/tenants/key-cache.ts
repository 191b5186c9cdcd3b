// Tenant keys checked once per isolate for a few seconds, so an enqueue, get
// or cancel is one round trip to the database rather than two.
//
// The bound: an isolate trusts a key it has checked for at most `ttlMs`
// (KEY_CACHE_SECONDS, at most 5 s). A key revoked through the API stops
// working at once in the isolate that revoked it (the cache is cleared) and
// within `ttlMs` in every other isolate; nothing else can make a revoked key
// live longer, since entries are never refreshed without a database check.
// Only successful checks are kept (a key created a moment ago works at once),
// under the SHA-256 of the whole key, never the key: a cached key maps to the
// tenant its row names, so it cannot act for any other tenant. At most
// `maxEntries` keys are kept (the oldest go first), so hostile traffic cannot
// grow the isolate.
import type { Queryable } from '../db/seam.ts';
import { hashKey, keyPrefix, tenantForKey } from './keys.ts';

export interface KeyCache {
  /** The key's tenant, from the cache while its check is fresh, else from the database. */
  tenantFor(db: Queryable, key: string): Promise<string | null>;
  /** Forgets every key (after a revocation in this isolate). */
  clear(): void;
  readonly size: number;
}

export const MAX_KEY_CACHE_MS = 5_000;

export function createKeyCache(options: { ttlMs: number; maxEntries?: number; clock?: () => number }): KeyCache {
  const ttlMs = Math.min(Math.max(options.ttlMs, 0), MAX_KEY_CACHE_MS);
  const maxEntries = options.maxEntries ?? 1_000;
  const clock = options.clock ?? Date.now;
  const entries = new Map<string, { tenant: string; expiresAt: number }>();
  return {
    async tenantFor(db, key) {
      if (ttlMs === 0 || !keyPrefix(key)) return tenantForKey(db, key);
      const id = await hashKey(key);
      const hit = entries.get(id);
      if (hit && clock() < hit.expiresAt) return hit.tenant;
      if (hit) entries.delete(id);
      const checkedAt = clock();
      const tenant = await tenantForKey(db, key);
      if (tenant) {
        entries.delete(id);
        entries.set(id, { tenant, expiresAt: checkedAt + ttlMs });
        while (entries.size > maxEntries) entries.delete(entries.keys().next().value!);
      }
      return tenant;
    },
    clear: () => entries.clear(),
    get size() {
      return entries.size;
    },
  };
}
