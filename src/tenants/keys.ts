// Tenant API keys. A key is `edsk_<prefix>_<secret>`: the typed `edsk_` lead
// lets secret scanners spot a leaked key; the 12-character prefix is public
// and indexes the row; only a SHA-256 of the whole key is stored (the secret
// carries 256 bits of entropy, so a slow hash would add latency, not safety).
// The hash is compared in constant time.
import { base64url, sha256Hex, timingSafeEqual } from '../crypto.ts';
import type { Queryable } from '../db/seam.ts';
import { findLiveKey, insertApiKey } from '../db/sql/tenants.ts';

export const KEY_LEAD = 'edsk_';
const PREFIX_ALPHABET = 'abcdefghijkmnpqrstuvwxyz23456789';
const KEY_PATTERN = /^edsk_([a-z2-9]{12})_([A-Za-z0-9_-]{43})$/;

function randomPrefix(): string {
  const bytes = crypto.getRandomValues(new Uint8Array(12));
  return [...bytes].map((b) => PREFIX_ALPHABET[b % PREFIX_ALPHABET.length]).join('');
}

export const hashKey = sha256Hex;

export interface NewKey {
  key: string;
  prefix: string;
  hash: string;
}

export async function generateKey(): Promise<NewKey> {
  const prefix = randomPrefix();
  const key = `${KEY_LEAD}${prefix}_${base64url(crypto.getRandomValues(new Uint8Array(32)))}`;
  return { key, prefix, hash: await hashKey(key) };
}

/** The public prefix of a well-formed key, or null. */
export function keyPrefix(key: string): string | null {
  return KEY_PATTERN.exec(key)?.[1] ?? null;
}

export async function keyMatches(key: string, storedHash: string): Promise<boolean> {
  return timingSafeEqual(await hashKey(key), storedHash);
}

export interface CreatedKey {
  id: string;
  tenant: string;
  prefix: string;
  /** Shown once; only its hash is stored. */
  key: string;
  createdAt: Date;
}

export async function createApiKey(db: Queryable, tenant: string, now?: Date): Promise<CreatedKey> {
  const generated = await generateKey();
  const row = await insertApiKey(db, { now, tenant, prefix: generated.prefix, hash: generated.hash });
  return { id: row.id, tenant: row.tenant, prefix: row.prefix, key: generated.key, createdAt: row.createdAt };
}

/** The tenant a bearer key belongs to, or null for a malformed, unknown or revoked key. */
export async function tenantForKey(db: Queryable, key: string): Promise<string | null> {
  const prefix = keyPrefix(key);
  if (!prefix) return null;
  const found = await findLiveKey(db, prefix);
  if (!found || !(await keyMatches(key, found.hash))) return null;
  return found.tenant;
}
