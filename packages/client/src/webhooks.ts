// Standard Webhooks signing (https://www.standardwebhooks.com, DESIGN §10).
// The built-in http task signs each delivery so any Standard Webhooks library
// verifies it; `verifyWebhook` is the same check for receivers written against
// this package (edge apps verifying our deliveries). Web Crypto only, so it runs
// in workerd, Node and browsers alike.
//
// Signed content: `${id}.${timestamp}.` followed by the exact body bytes. The
// id stays the same across retries (receivers deduplicate on it); the
// timestamp is the attempt's, so a captured delivery cannot be replayed once it
// is older than the receiver's tolerance.

// A type alias rather than an interface, so the headers signWebhook returns
// can be handed straight to verifyWebhook (a record type).
export type WebhookHeaders = {
  'webhook-id': string;
  'webhook-timestamp': string;
  'webhook-signature': string;
};

/** The body as sent: text is signed as its UTF-8 bytes. */
export type WebhookBody = string | Uint8Array | ArrayBuffer;

/** Headers as a Fetch `Headers`, or a plain record (node:http's `IncomingHttpHeaders` fits). */
export type WebhookHeaderSource = Headers | Record<string, string | readonly string[] | undefined>;

export class WebhookVerificationError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'WebhookVerificationError';
  }
}

const SECRET_PREFIX = 'whsec_';
const encoder = new TextEncoder();

/**
 * Decodes a `whsec_<base64>` secret into its key bytes (the prefix is optional,
 * as in the reference libraries). Throws a TypeError for a malformed secret, so
 * configuration can be checked once at startup.
 */
export function parseWebhookSecret(secret: string): Uint8Array {
  const encoded = secret.startsWith(SECRET_PREFIX) ? secret.slice(SECRET_PREFIX.length) : secret;
  let key: Uint8Array;
  try {
    key = base64Decode(encoded);
  } catch {
    throw new TypeError('webhook secret is not valid base64 (expected whsec_<base64>)');
  }
  if (key.length === 0) throw new TypeError('webhook secret is empty');
  return key;
}

/**
 * Signs one delivery; `timestamp` is a Date or whole seconds since the epoch.
 * Several secrets (a rotation's new and old) give one `v1,` signature each,
 * space-separated, so a receiver holding either verifies it.
 */
export async function signWebhook(input: {
  secret: string | readonly string[];
  id: string;
  timestamp: Date | number;
  body: WebhookBody;
}): Promise<WebhookHeaders> {
  const seconds = toSeconds(input.timestamp);
  const secrets = typeof input.secret === 'string' ? [input.secret] : input.secret;
  if (secrets.length === 0) throw new TypeError('signWebhook needs at least one secret');
  const content = signedContent(input.id, String(seconds), input.body);
  const macs = await Promise.all(secrets.map((secret) => hmac(parseWebhookSecret(secret), content)));
  return {
    'webhook-id': input.id,
    'webhook-timestamp': String(seconds),
    'webhook-signature': macs.map((mac) => `v1,${base64Encode(mac)}`).join(' '),
  };
}

/**
 * Verifies a delivery: the three headers are present, the timestamp is within
 * `toleranceSeconds` of `now` in either direction, and one of the
 * space-separated `v1,` signatures matches. Resolves when it is authentic;
 * throws WebhookVerificationError otherwise. Pass the raw body, before any JSON
 * parsing: re-serialized JSON does not verify.
 */
export async function verifyWebhook(input: {
  secret: string;
  headers: WebhookHeaderSource;
  body: WebhookBody;
  now?: Date;
  toleranceSeconds?: number;
}): Promise<void> {
  const id = header(input.headers, 'webhook-id');
  const timestamp = header(input.headers, 'webhook-timestamp');
  const signatures = header(input.headers, 'webhook-signature');
  if (!id || !timestamp || !signatures) throw new WebhookVerificationError('missing required webhook headers');
  if (!/^\d{1,15}$/.test(timestamp)) throw new WebhookVerificationError('invalid webhook-timestamp');

  const tolerance = input.toleranceSeconds ?? 300;
  const now = Math.floor((input.now ?? new Date()).getTime() / 1000);
  const sent = Number(timestamp);
  if (now - sent > tolerance) throw new WebhookVerificationError('message timestamp too old');
  if (sent - now > tolerance) throw new WebhookVerificationError('message timestamp too new');

  const expected = await hmac(parseWebhookSecret(input.secret), signedContent(id, timestamp, input.body));
  let matched = false;
  for (const versioned of signatures.split(' ')) {
    const comma = versioned.indexOf(',');
    if (comma < 0 || versioned.slice(0, comma) !== 'v1') continue;
    let candidate: Uint8Array;
    try {
      candidate = base64Decode(versioned.slice(comma + 1));
    } catch {
      continue;
    }
    // No early exit: every candidate is compared in full.
    matched = constantTimeEqual(candidate, expected) || matched;
  }
  if (!matched) throw new WebhookVerificationError('no matching signature found');
}

function signedContent(id: string, timestamp: string, body: WebhookBody): Uint8Array {
  const prefix = encoder.encode(`${id}.${timestamp}.`);
  const bytes = typeof body === 'string' ? encoder.encode(body) : body instanceof Uint8Array ? body : new Uint8Array(body);
  const content = new Uint8Array(prefix.length + bytes.length);
  content.set(prefix, 0);
  content.set(bytes, prefix.length);
  return content;
}

async function hmac(key: Uint8Array, content: Uint8Array): Promise<Uint8Array> {
  // Both views own plain ArrayBuffers (made here or by TextEncoder): no SharedArrayBuffer.
  const cryptoKey = await crypto.subtle.importKey('raw', key as Uint8Array<ArrayBuffer>, { name: 'HMAC', hash: 'SHA-256' }, false, ['sign']);
  return new Uint8Array(await crypto.subtle.sign('HMAC', cryptoKey, content as Uint8Array<ArrayBuffer>));
}

/**
 * Compares in time that depends only on the lengths (which are public: every
 * HMAC-SHA256 is 32 bytes), so a forger learns nothing from how long a
 * rejection takes.
 */
function constantTimeEqual(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  let diff = 0;
  for (let i = 0; i < a.length; i++) diff |= (a[i] ?? 0) ^ (b[i] ?? 0);
  return diff === 0;
}

function header(headers: WebhookHeaderSource, name: string): string | undefined {
  if (headers instanceof Headers) return headers.get(name) ?? undefined;
  for (const [key, value] of Object.entries(headers)) {
    if (key.toLowerCase() !== name) continue;
    return typeof value === 'string' ? value : value?.join(' ');
  }
  return undefined;
}

function toSeconds(timestamp: Date | number): number {
  const seconds = typeof timestamp === 'number' ? timestamp : Math.floor(timestamp.getTime() / 1000);
  if (!Number.isSafeInteger(seconds) || seconds < 0) {
    throw new TypeError('webhook timestamp must be a valid Date or whole seconds since the epoch');
  }
  return seconds;
}

function base64Encode(bytes: Uint8Array): string {
  let binary = '';
  for (const b of bytes) binary += String.fromCharCode(b);
  return btoa(binary);
}

/** Strict enough to refuse garbage: atob throws on characters outside the alphabet. */
function base64Decode(text: string): Uint8Array {
  const binary = atob(text);
  return Uint8Array.from(binary, (c) => c.charCodeAt(0));
}
