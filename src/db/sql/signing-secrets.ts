// Statements for the tenants' webhook signing secrets (migration 0010). The
// values are ciphertexts: encryption and decryption live above, in
// src/tenants/signing-secrets.ts; nothing here sees a usable secret.
import type { Queryable } from '../seam.ts';
import { sql } from '../seam.ts';

type Now = Date | null | undefined;
const at = (now: Now) => now ?? null;

/** A tenant's stored secrets; `previous` only while its overlap lasts. */
export interface SigningSecretRow {
  tenant: string;
  current: { ciphertext: string; createdAt: Date };
  previous: { ciphertext: string; expiresAt: Date } | null;
}

interface Row {
  tenant: string;
  current_secret: string;
  current_created_at: Date;
  previous_secret: string | null;
  previous_expires_at: Date | null;
}

const fromRow = (r: Row): SigningSecretRow => ({
  tenant: r.tenant,
  current: { ciphertext: r.current_secret, createdAt: r.current_created_at },
  previous:
    r.previous_secret !== null && r.previous_expires_at !== null
      ? { ciphertext: r.previous_secret, expiresAt: r.previous_expires_at }
      : null,
});

/** The columns every statement returns; a previous secret past its expiry reads as none. */
const liveColumns = (t: string) => `${t}.tenant, ${t}.current_secret, ${t}.current_created_at,
       case when ${t}.previous_expires_at > clock.now then ${t}.previous_secret end as previous_secret,
       case when ${t}.previous_expires_at > clock.now then ${t}.previous_expires_at end as previous_expires_at`;

/**
 * The secrets of several tenants (a consumer batch's, or one request's).
 * Reads only, no lock: a rotation committing meanwhile is seen by the next
 * batch, and the overlap exists for exactly that.
 */
const signingSecretsFind = sql(
  'signing_secrets_find',
  `with clock as (select coalesce($1::timestamptz, now()) as now)
   select ${liveColumns('s')}
   from signing_secrets s cross join clock
   where s.tenant = any($2::text[])`,
);

export async function findSigningSecrets(q: Queryable, p: { now?: Now; tenants: readonly string[] }): Promise<SigningSecretRow[]> {
  const rows = await q.query<Row>(signingSecretsFind, [at(p.now), [...p.tenants]]);
  return rows.map(fromRow);
}

/**
 * Creates the first secret of each given tenant, race-safe: of two creators
 * one inserts and the other's row conflicts, waits on the winner's row lock,
 * and takes the winner's secret back (the no-op update returns the committed
 * row; DO NOTHING would return nothing, and a separate select in the same
 * statement would not see the winner's commit). Runs only for tenants the
 * find above did not return, so the no-op update is written at most once per
 * race. Tenants must be distinct (one row may not be updated twice).
 */
const signingSecretsInsertMissing = sql(
  'signing_secrets_insert_missing',
  `with clock as (select coalesce($1::timestamptz, now()) as now),
   ins as (
     insert into signing_secrets as s (tenant, current_secret, current_created_at, updated_at)
     select n.tenant, n.secret, clock.now, clock.now
     from unnest($2::text[], $3::text[]) as n(tenant, secret) cross join clock
     on conflict (tenant) do update set tenant = s.tenant
     returning s.*)
   select ${liveColumns('ins')}
   from ins cross join clock`,
);

export async function insertMissingSigningSecrets(
  q: Queryable,
  p: { now?: Now; secrets: readonly { tenant: string; ciphertext: string }[] },
): Promise<SigningSecretRow[]> {
  const rows = await q.query<Row>(signingSecretsInsertMissing, [
    at(p.now),
    p.secrets.map((s) => s.tenant),
    p.secrets.map((s) => s.ciphertext),
  ]);
  return rows.map(fromRow);
}

/**
 * Rotates one tenant's secret: the new one becomes current; the replaced one
 * stays valid as previous for `overlapSeconds` (0: replaced at once). Creates
 * the tenant's first secret when it has none. The upsert takes the row lock,
 * so concurrent rotations apply one after the other, the later one keeping
 * the earlier one's new secret as its previous.
 */
const signingSecretsRotate = sql(
  'signing_secrets_rotate',
  `with clock as (select coalesce($1::timestamptz, now()) as now),
   ins as (
     insert into signing_secrets as s (tenant, current_secret, current_created_at, updated_at)
     select $2::text, $3::text, clock.now, clock.now from clock
     on conflict (tenant) do update set
       previous_secret = case when $4::integer > 0 then s.current_secret end,
       previous_expires_at = case when $4::integer > 0 then excluded.current_created_at + make_interval(secs => $4::integer) end,
       current_secret = excluded.current_secret,
       current_created_at = excluded.current_created_at,
       updated_at = excluded.updated_at
     returning s.*)
   select ${liveColumns('ins')}
   from ins cross join clock`,
);

export async function rotateSigningSecret(
  q: Queryable,
  p: { now?: Now; tenant: string; ciphertext: string; overlapSeconds: number },
): Promise<SigningSecretRow> {
  const rows = await q.query<Row>(signingSecretsRotate, [at(p.now), p.tenant, p.ciphertext, p.overlapSeconds]);
  return fromRow(rows[0]!);
}
