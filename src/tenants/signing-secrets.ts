// Per-tenant webhook signing secrets (issue 10, finding 1; DESIGN §10).
//
// Each tenant signs with its own `whsec_` secret (32 random bytes), created on
// first need: the first delivery of one of its http tasks, or its first read
// of GET /v1/signing-secret. Stored encrypted with AES-256-GCM under a key
// derived with HKDF from the SIGNING_SECRET Worker secret (the key-encryption
// key; it signs nothing itself). The tenant's name is the additional data, so
// a ciphertext moved to another tenant's row fails to decrypt instead of
// letting one tenant sign as another. Web Crypto only: runs in workerd and Node.
//
// Secrets never reach a log line or an error message.
import type { Queryable } from '../db/seam.ts';
import {
  findSigningSecrets,
  insertMissingSigningSecrets,
  rotateSigningSecret,
  type SigningSecretRow,
} from '../db/sql/signing-secrets.ts';
import { AppError } from '../errors.ts';

export const SIGNING_SECRET_LEAD = 'whsec_';
/** Bytes of randomness in each tenant secret (Standard Webhooks suggests 24 to 64). */
const SECRET_BYTES = 32;
/** The key-encryption key must carry real entropy: the `npm start` and README ones are `whsec_` + 32 bytes. */
export const MIN_KEK_LENGTH = 32;
/** The default overlap of a rotation: receivers get a day to move to the new secret. */
export const DEFAULT_ROTATION_OVERLAP_SECONDS = 86_400;
export const MAX_ROTATION_OVERLAP_SECONDS = 30 * 86_400;

const CIPHERTEXT_VERSION = 'v1';
const encoder = new TextEncoder();

export interface TenantSigningSecrets {
  current: { secret: string; createdAt: Date };
  /** The replaced secret, while its overlap lasts. */
  previous: { secret: string; expiresAt: Date } | null;
}

/** Loads the secrets a delivery signs with: current first, then previous during an overlap. */
export type SigningSecretsLoader = (tenant: string) => Promise<string[]>;

export interface SigningSecretStore {
  /** False when SIGNING_SECRET is unset: deliveries go unsigned and the routes refuse. */
  readonly configured: boolean;
  /** The tenant's secrets, creating its first one on first need. */
  get(db: Queryable, tenant: string, now?: Date): Promise<TenantSigningSecrets>;
  /** Makes a new current secret; the old one stays valid for `overlapSeconds` (0: at once). */
  rotate(db: Queryable, tenant: string, options: { overlapSeconds: number; now?: Date }): Promise<TenantSigningSecrets>;
  /**
   * A loader for one consumer batch: its first call reads (and if need be
   * creates) the secrets of every given tenant in one statement; later calls
   * share that result. Never called, it costs nothing.
   */
  batchLoader(db: Queryable, tenants: readonly string[], now?: Date): SigningSecretsLoader;
}

export function newSigningSecret(): string {
  return `${SIGNING_SECRET_LEAD}${base64(crypto.getRandomValues(new Uint8Array(SECRET_BYTES)))}`;
}

/**
 * The store over a key-encryption key (SIGNING_SECRET). Throws a TypeError
 * when the key is given but too short, so a weak configuration fails at
 * startup; undefined or empty gives an unconfigured store.
 */
export function createSigningSecretStore(kek: string | undefined): SigningSecretStore {
  if (!kek) return unconfiguredStore;
  if (kek.length < MIN_KEK_LENGTH) {
    throw new TypeError(`SIGNING_SECRET must be at least ${MIN_KEK_LENGTH} characters (e.g. whsec_ and 32 random bytes in base64)`);
  }
  let key: Promise<CryptoKey> | undefined;
  const keyOnce = () => (key ??= deriveKey(kek));

  const decrypt = async (tenant: string, ciphertext: string) => {
    try {
      return await decryptSecret(await keyOnce(), tenant, ciphertext);
    } catch {
      // No detail: the ciphertext and the key stay out of logs.
      throw new Error(`signing secret of tenant ${tenant} cannot be decrypted (was SIGNING_SECRET changed?)`);
    }
  };
  const open = async (row: SigningSecretRow): Promise<TenantSigningSecrets> => ({
    current: { secret: await decrypt(row.tenant, row.current.ciphertext), createdAt: row.current.createdAt },
    previous: row.previous ? { secret: await decrypt(row.tenant, row.previous.ciphertext), expiresAt: row.previous.expiresAt } : null,
  });

  /** Reads the tenants' rows in one statement; a second creates the missing ones (first need only). */
  async function loadRows(db: Queryable, tenants: readonly string[], now?: Date): Promise<Map<string, SigningSecretRow>> {
    const distinct = [...new Set(tenants)];
    const rows = new Map((await findSigningSecrets(db, { now, tenants: distinct })).map((r) => [r.tenant, r]));
    const missing = distinct.filter((t) => !rows.has(t));
    if (missing.length > 0) {
      const k = await keyOnce();
      const secrets = await Promise.all(missing.map(async (tenant) => ({ tenant, ciphertext: await encryptSecret(k, tenant, newSigningSecret()) })));
      for (const r of await insertMissingSigningSecrets(db, { now, secrets })) rows.set(r.tenant, r);
    }
    return rows;
  }

  return {
    configured: true,
    async get(db, tenant, now) {
      const row = (await loadRows(db, [tenant], now)).get(tenant);
      if (!row) throw new Error(`signing secret of tenant ${tenant} was neither found nor created`);
      return open(row);
    },
    async rotate(db, tenant, { overlapSeconds, now }) {
      const ciphertext = await encryptSecret(await keyOnce(), tenant, newSigningSecret());
      return open(await rotateSigningSecret(db, { now, tenant, ciphertext, overlapSeconds }));
    },
    batchLoader(db, tenants, now) {
      let loaded: Promise<Map<string, SigningSecretRow>> | undefined;
      const opened = new Map<string, Promise<string[]>>();
      return (tenant) => {
        let secrets = opened.get(tenant);
        if (!secrets) {
          secrets = (loaded ??= loadRows(db, tenants, now)).then(async (rows) => {
            const row = rows.get(tenant);
            if (!row) throw new Error(`signing secret of tenant ${tenant} was not loaded with its batch`);
            const s = await open(row);
            return s.previous ? [s.current.secret, s.previous.secret] : [s.current.secret];
          });
          opened.set(tenant, secrets);
        }
        return secrets;
      };
    },
  };
}

const notConfigured = () =>
  new AppError('conflict', 'signing secrets are not configured on this deployment (set the SIGNING_SECRET Worker secret)');

const unconfiguredStore: SigningSecretStore = {
  configured: false,
  get: () => Promise.reject(notConfigured()),
  rotate: () => Promise.reject(notConfigured()),
  batchLoader: () => async () => [],
};

async function deriveKey(kek: string): Promise<CryptoKey> {
  const material = await crypto.subtle.importKey('raw', encoder.encode(kek), 'HKDF', false, ['deriveKey']);
  return crypto.subtle.deriveKey(
    { name: 'HKDF', hash: 'SHA-256', salt: encoder.encode('edge-scheduler signing secrets'), info: encoder.encode('aes-256-gcm kek v1') },
    material,
    { name: 'AES-GCM', length: 256 },
    false,
    ['encrypt', 'decrypt'],
  );
}

/** `v1:<iv>:<ciphertext and tag>`, base64; the tenant is bound in as additional data. */
export async function encryptSecret(key: CryptoKey, tenant: string, secret: string): Promise<string> {
  const iv = crypto.getRandomValues(new Uint8Array(12));
  const sealed = await crypto.subtle.encrypt(
    { name: 'AES-GCM', iv, additionalData: encoder.encode(`tenant:${tenant}`) },
    key,
    encoder.encode(secret),
  );
  return `${CIPHERTEXT_VERSION}:${base64(iv)}:${base64(new Uint8Array(sealed))}`;
}

async function decryptSecret(key: CryptoKey, tenant: string, stored: string): Promise<string> {
  const [version, iv, sealed] = stored.split(':');
  if (version !== CIPHERTEXT_VERSION || !iv || !sealed) throw new Error('unknown ciphertext format');
  const plain = await crypto.subtle.decrypt(
    { name: 'AES-GCM', iv: unbase64(iv), additionalData: encoder.encode(`tenant:${tenant}`) },
    key,
    unbase64(sealed),
  );
  return new TextDecoder().decode(plain);
}

function base64(bytes: Uint8Array): string {
  let binary = '';
  for (const b of bytes) binary += String.fromCharCode(b);
  return btoa(binary);
}

function unbase64(text: string): Uint8Array<ArrayBuffer> {
  return Uint8Array.from(atob(text), (c) => c.charCodeAt(0));
}
