-- 0010: a webhook signing secret per tenant (issue 10, finding 1).
--
-- One global secret signed every tenant's deliveries, and a tenant chooses
-- both the URL and the body: whoever could verify their own deliveries could
-- forge deliveries to every other tenant's endpoint. Each tenant now has its
-- own `whsec_` secret, created on first need (first delivery or first read).
--
-- Secrets are stored encrypted (AES-256-GCM under a key derived with HKDF
-- from the SIGNING_SECRET Worker secret, the tenant's name bound in as
-- additional data, so a row copied to another tenant does not decrypt):
-- `v1:<iv>:<ciphertext>` in base64. The database alone never holds a usable
-- secret.
--
-- Rotation keeps the replaced secret as `previous` until `previous_expires_at`
-- so receivers can move over; deliveries carry both signatures meanwhile. A
-- second rotation during an overlap replaces `previous` (the oldest secret
-- stops at once). Expired previous secrets are ignored by every read.
create table signing_secrets (
  tenant              text primary key,
  current_secret      text not null,
  current_created_at  timestamptz not null,
  previous_secret     text,
  previous_expires_at timestamptz,
  updated_at          timestamptz not null default now(),
  constraint signing_secrets_previous_pair check ((previous_secret is null) = (previous_expires_at is null)),
  constraint signing_secrets_encrypted check (current_secret like 'v1:%' and (previous_secret is null or previous_secret like 'v1:%'))
);
