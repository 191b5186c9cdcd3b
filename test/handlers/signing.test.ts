// Standard Webhooks signing, checked against the official `standardwebhooks`
// package in both directions, so any receiver using a Standard Webhooks
// library verifies our deliveries.
import { Webhook } from 'standardwebhooks';
import { afterEach, describe, expect, it, vi } from 'vitest';
import {
  parseWebhookSecret,
  signWebhook,
  verifyWebhook,
  WebhookVerificationError,
  type WebhookHeaders,
} from '../../packages/client/src/webhooks.ts';

const SECRET = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw';
const OTHER_SECRET = `whsec_${btoa('a different key of 32 bytes!!!!')}`;
const BODY = '{"event":"invoice.paid","amount":4200,"note":"café ☕"}';

const nowSeconds = () => Math.floor(Date.now() / 1000);
const official = () => new Webhook(SECRET);

/** Both verifiers agree: true when a delivery verifies, false when it is refused. */
async function verifiesWithBoth(headers: WebhookHeaders, body: string): Promise<[ours: boolean, theirs: boolean]> {
  const ours = await verifyWebhook({ secret: SECRET, headers, body }).then(
    () => true,
    (error: unknown) => {
      expect(error).toBeInstanceOf(WebhookVerificationError);
      return false;
    },
  );
  let theirs: boolean;
  try {
    official().verify(body, { ...headers }, { jsonParse: false });
    theirs = true;
  } catch (error) {
    expect((error as Error).name).toBe('WebhookVerificationError');
    theirs = false;
  }
  return [ours, theirs];
}

afterEach(() => {
  vi.useRealTimers();
});

describe('signWebhook', () => {
  it('matches the Standard Webhooks reference vector', async () => {
    const headers = await signWebhook({
      secret: SECRET,
      id: 'msg_p5jXN8AQM9LWM0D4loKWxJek',
      timestamp: 1614265330,
      body: '{"test": 2432232314}',
    });
    expect(headers).toEqual({
      'webhook-id': 'msg_p5jXN8AQM9LWM0D4loKWxJek',
      'webhook-timestamp': '1614265330',
      'webhook-signature': 'v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=',
    });
  });

  it('produces a delivery the official package and ours both verify', async () => {
    const headers = await signWebhook({ secret: SECRET, id: '42', timestamp: new Date(), body: BODY });
    expect(headers['webhook-timestamp']).toMatch(/^\d+$/);
    expect(await verifiesWithBoth(headers, BODY)).toEqual([true, true]);
    // The official package also parses the body it verified.
    expect(official().verify(BODY, { ...headers })).toEqual(JSON.parse(BODY));
  });

  it('uses whole seconds and the same signature as the official signer', async () => {
    const at = new Date('2026-03-01T12:00:00.987Z');
    const headers = await signWebhook({ secret: SECRET, id: 'task-7', timestamp: at, body: BODY });
    expect(headers['webhook-timestamp']).toBe(String(Math.floor(at.getTime() / 1000)));
    expect(headers['webhook-signature']).toBe(official().sign('task-7', at, BODY));
  });

  it('signs bytes and the same text identically', async () => {
    const timestamp = nowSeconds();
    const fromText = await signWebhook({ secret: SECRET, id: '1', timestamp, body: BODY });
    const fromBytes = await signWebhook({ secret: SECRET, id: '1', timestamp, body: new TextEncoder().encode(BODY) });
    expect(fromBytes).toEqual(fromText);
  });

  it('accepts a secret without the whsec_ prefix, as the reference libraries do', async () => {
    const timestamp = nowSeconds();
    const withPrefix = await signWebhook({ secret: SECRET, id: '1', timestamp, body: BODY });
    const without = await signWebhook({ secret: SECRET.slice('whsec_'.length), id: '1', timestamp, body: BODY });
    expect(without).toEqual(withPrefix);
  });

  it('refuses malformed secrets and timestamps', async () => {
    expect(() => parseWebhookSecret('whsec_not base64!')).toThrow(TypeError);
    expect(() => parseWebhookSecret('whsec_')).toThrow(/empty/);
    await expect(signWebhook({ secret: SECRET, id: '1', timestamp: 1.5, body: '' })).rejects.toThrow(TypeError);
    await expect(signWebhook({ secret: SECRET, id: '1', timestamp: new Date(Number.NaN), body: '' })).rejects.toThrow(
      TypeError,
    );
  });
});

describe('tampering', () => {
  it('fails both verifiers when one byte of the body changes', async () => {
    const headers = await signWebhook({ secret: SECRET, id: '42', timestamp: new Date(), body: BODY });
    const tampered = BODY.replace('4200', '4201');
    expect(tampered).not.toBe(BODY);
    expect(await verifiesWithBoth(headers, tampered)).toEqual([false, false]);
  });

  it('fails both verifiers when the id changes', async () => {
    const headers = await signWebhook({ secret: SECRET, id: '42', timestamp: new Date(), body: BODY });
    expect(await verifiesWithBoth({ ...headers, 'webhook-id': '43' }, BODY)).toEqual([false, false]);
  });

  it('fails both verifiers when the timestamp changes, even within tolerance', async () => {
    const headers = await signWebhook({ secret: SECRET, id: '42', timestamp: new Date(), body: BODY });
    const shifted = String(Number(headers['webhook-timestamp']) - 1);
    expect(await verifiesWithBoth({ ...headers, 'webhook-timestamp': shifted }, BODY)).toEqual([false, false]);
  });

  it('fails both verifiers under another secret', async () => {
    const headers = await signWebhook({ secret: OTHER_SECRET, id: '42', timestamp: new Date(), body: BODY });
    expect(await verifiesWithBoth(headers, BODY)).toEqual([false, false]);
  });

  it('fails both verifiers when the signature is flipped by one bit', async () => {
    const headers = await signWebhook({ secret: SECRET, id: '42', timestamp: new Date(), body: BODY });
    const raw = Uint8Array.from(atob(headers['webhook-signature'].slice(3)), (c) => c.charCodeAt(0));
    raw[0] = (raw[0] ?? 0) ^ 1;
    const flipped = `v1,${btoa(String.fromCharCode(...raw))}`;
    expect(await verifiesWithBoth({ ...headers, 'webhook-signature': flipped }, BODY)).toEqual([false, false]);
  });
});

describe('timestamps', () => {
  it.each([
    ['too old', -301],
    ['too new', 301],
    ['an hour old', -3600],
  ])('refuses a delivery %s in both verifiers', async (_label, offset) => {
    const headers = await signWebhook({ secret: SECRET, id: '42', timestamp: nowSeconds() + offset, body: BODY });
    expect(await verifiesWithBoth(headers, BODY)).toEqual([false, false]);
  });

  it('accepts a delivery just inside the default 5-minute tolerance', async () => {
    const headers = await signWebhook({ secret: SECRET, id: '42', timestamp: nowSeconds() - 295, body: BODY });
    expect(await verifiesWithBoth(headers, BODY)).toEqual([true, true]);
  });

  it('judges time by the given now and tolerance', async () => {
    const sentAt = new Date('2026-03-01T12:00:00Z');
    const headers = await signWebhook({ secret: SECRET, id: '42', timestamp: sentAt, body: BODY });
    const at = (seconds: number) => new Date(sentAt.getTime() + seconds * 1000);
    await expect(verifyWebhook({ secret: SECRET, headers, body: BODY, now: at(300) })).resolves.toBeUndefined();
    await expect(verifyWebhook({ secret: SECRET, headers, body: BODY, now: at(301) })).rejects.toThrow(/too old/);
    await expect(verifyWebhook({ secret: SECRET, headers, body: BODY, now: at(-301) })).rejects.toThrow(/too new/);
    await expect(
      verifyWebhook({ secret: SECRET, headers, body: BODY, now: at(60), toleranceSeconds: 30 }),
    ).rejects.toThrow(/too old/);
    // The official package reads the wall clock: move it to the same instants.
    vi.useFakeTimers({ now: at(300) });
    expect(() => official().verify(BODY, { ...headers }, { jsonParse: false })).not.toThrow();
    vi.setSystemTime(at(301));
    expect(() => official().verify(BODY, { ...headers }, { jsonParse: false })).toThrow(/too old/);
  });

  it('refuses a timestamp that is not whole seconds', async () => {
    const headers = await signWebhook({ secret: SECRET, id: '42', timestamp: new Date(), body: BODY });
    for (const bad of ['', 'abc', `${headers['webhook-timestamp']}.5`, `-${headers['webhook-timestamp']}`]) {
      await expect(
        verifyWebhook({ secret: SECRET, headers: { ...headers, 'webhook-timestamp': bad }, body: BODY }),
      ).rejects.toBeInstanceOf(WebhookVerificationError);
    }
  });
});

describe('verifyWebhook', () => {
  it('verifies a signature made by the official package', async () => {
    const id = 'msg_2KWPBgLlAfxdpx2AI54pPJ85f4W';
    const at = new Date();
    const headers = {
      'webhook-id': id,
      'webhook-timestamp': String(Math.floor(at.getTime() / 1000)),
      'webhook-signature': official().sign(id, at, BODY),
    };
    await expect(verifyWebhook({ secret: SECRET, headers, body: BODY })).resolves.toBeUndefined();
    await expect(verifyWebhook({ secret: SECRET, headers, body: `${BODY} ` })).rejects.toThrow(/no matching signature/);
  });

  it('accepts any one of several space-separated signatures (key rotation)', async () => {
    const good = await signWebhook({ secret: SECRET, id: '42', timestamp: new Date(), body: BODY });
    const old = await signWebhook({ secret: OTHER_SECRET, id: '42', timestamp: new Date(), body: BODY });
    const signature = `v1a,xyz v2,${good['webhook-signature'].slice(3)} ${old['webhook-signature']} v1,!!notbase64 ${good['webhook-signature']}`;
    const headers = { ...good, 'webhook-signature': signature };
    expect(await verifiesWithBoth(headers, BODY)).toEqual([true, true]);
  });

  it('signs with several secrets at once (a rotation): each verifies, a third does not', async () => {
    const third = `whsec_${btoa('a third key, also 32 bytes long!')}`;
    const headers = await signWebhook({ secret: [SECRET, OTHER_SECRET], id: '42', timestamp: new Date(), body: BODY });
    expect(headers['webhook-signature'].split(' ')).toHaveLength(2);
    for (const secret of [SECRET, OTHER_SECRET]) {
      await expect(verifyWebhook({ secret, headers, body: BODY })).resolves.toBeUndefined();
      expect(() => new Webhook(secret).verify(BODY, headers)).not.toThrow();
    }
    await expect(verifyWebhook({ secret: third, headers, body: BODY })).rejects.toThrow(WebhookVerificationError);
    await expect(signWebhook({ secret: [], id: '42', timestamp: new Date(), body: BODY })).rejects.toThrow(TypeError);
  });

  it('ignores a right signature under a version other than v1', async () => {
    const good = await signWebhook({ secret: SECRET, id: '42', timestamp: new Date(), body: BODY });
    const headers = { ...good, 'webhook-signature': `v2,${good['webhook-signature'].slice(3)}` };
    expect(await verifiesWithBoth(headers, BODY)).toEqual([false, false]);
  });

  it.each(['webhook-id', 'webhook-timestamp', 'webhook-signature'] as const)(
    'refuses a delivery without %s',
    async (name) => {
      const headers: Partial<WebhookHeaders> = await signWebhook({ secret: SECRET, id: '42', timestamp: new Date(), body: BODY });
      delete headers[name];
      await expect(verifyWebhook({ secret: SECRET, headers, body: BODY })).rejects.toThrow(/missing required/);
    },
  );

  it('reads Fetch Headers and node-style records with any header case', async () => {
    const signed = await signWebhook({ secret: SECRET, id: '42', timestamp: new Date(), body: BODY });
    await expect(verifyWebhook({ secret: SECRET, headers: new Headers({ ...signed }), body: BODY })).resolves.toBeUndefined();
    const capitalized = {
      'Webhook-Id': signed['webhook-id'],
      'WEBHOOK-TIMESTAMP': signed['webhook-timestamp'],
      'Webhook-Signature': signed['webhook-signature'],
      'content-type': 'application/json',
      'x-absent': undefined,
    };
    await expect(verifyWebhook({ secret: SECRET, headers: capitalized, body: BODY })).resolves.toBeUndefined();
  });

  it('verifies the raw bytes, as an ArrayBuffer or Uint8Array', async () => {
    const signed = await signWebhook({ secret: SECRET, id: '42', timestamp: new Date(), body: BODY });
    const bytes = new TextEncoder().encode(BODY);
    await expect(verifyWebhook({ secret: SECRET, headers: signed, body: bytes })).resolves.toBeUndefined();
    await expect(verifyWebhook({ secret: SECRET, headers: signed, body: bytes.slice().buffer })).resolves.toBeUndefined();
  });
});
