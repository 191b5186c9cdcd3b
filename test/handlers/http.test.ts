// The built-in http task against a real local receiver (node:http on
// 127.0.0.1): signing verified by the official Standard Webhooks package,
// each status class mapped to its outcome, redirects never followed, the
// timeout signal honoured, and response bodies kept out of errors.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Webhook } from 'standardwebhooks';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { AppError } from '../../src/errors.ts';
import { createHttpTask, retryAfterMs, type HttpTaskOptions } from '../../src/handlers/http.ts';
import { PermanentError, RetryAfterError } from '../../src/handlers/errors.ts';
import { createRegistry, type TaskContext, type TaskHandler } from '../../src/handlers/registry.ts';
import { verifyWebhook } from '../../packages/client/src/webhooks.ts';
import { silentLogger } from '../../src/log.ts';
import { MAX_RESULT_BYTES, resultText } from '../../src/tasks/attempts.ts';

const SECRET = `whsec_${btoa('edge-scheduler test signing key!')}`;

interface Received {
  method: string;
  path: string;
  headers: IncomingMessage['headers'];
  body: string;
}

let server: Server;
let base: string;
let received: Received[] = [];
let flakyCalls = 0;

/** The receiver: each path answers one way. */
function route(req: IncomingMessage, res: ServerResponse, body: string): void {
  const path = new URL(req.url ?? '/', base).pathname;
  received.push({ method: req.method ?? '', path, headers: req.headers, body });
  switch (path) {
    case '/ok':
      res.writeHead(200, { 'content-type': 'text/plain' }).end('thanks');
      return;
    case '/accepted':
      res.writeHead(202).end();
      return;
    case '/json':
      res.writeHead(201, { 'content-type': 'application/json; charset=utf-8' }).end('{"id":"r-1","nested":{"ok":[1,2]}}');
      return;
    case '/json-nul':
      res.writeHead(200, { 'content-type': 'application/json' }).end('{"nul":"a\\u0000b"}');
      return;
    case '/huge-ok':
      res.writeHead(200, { 'content-type': 'text/plain' }).end('"\u0000é'.repeat(40_000)); // 160 kB; escapes make it longer as JSON
      return;
    case '/flaky':
      flakyCalls += 1;
      res.writeHead(flakyCalls === 1 ? 500 : 204).end();
      return;
    case '/fail':
      res.writeHead(500, { 'content-type': 'text/plain' }).end('internal oops: database on fire');
      return;
    case '/busy':
      res.writeHead(503, { 'retry-after': '7' }).end('come back later');
      return;
    case '/busy-date':
      res.writeHead(503, { 'retry-after': 'Sun, 01 Mar 2026 12:00:30 GMT' }).end();
      return;
    case '/rate-limited':
      res.writeHead(429, { 'retry-after': '86400' }).end();
      return;
    case '/request-timeout':
      res.writeHead(408).end();
      return;
    case '/missing':
      res.writeHead(404, { 'content-type': 'application/json' }).end('{"error":"no such hook"}');
      return;
    case '/unauthorized':
      res.writeHead(401).end();
      return;
    case '/redirect':
      res.writeHead(302, { location: `${base}/landing` }).end();
      return;
    case '/landing':
      res.writeHead(200).end('you should never see this');
      return;
    case '/slow':
      // Never answers: only the caller's abort ends this request.
      return;
    case '/huge': {
      res.writeHead(500, { 'content-type': 'text/plain' });
      res.on('error', () => {});
      const chunk = Buffer.alloc(64 * 1024, 'x');
      let sent = 0;
      const pump = () => {
        while (sent < 20 * 1024 * 1024 && !res.destroyed) {
          sent += chunk.length;
          if (!res.write(chunk)) return void res.once('drain', pump);
        }
        if (!res.destroyed) res.end();
      };
      pump();
      return;
    }
    default:
      res.writeHead(418).end();
  }
}

beforeAll(async () => {
  server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => route(req, res, Buffer.concat(chunks).toString('utf8')));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(async () => {
  server.closeAllConnections();
  await new Promise<void>((resolve) => server.close(() => resolve()));
});

beforeEach(() => {
  received = [];
  flakyCalls = 0;
});

function context(taskId: string, signal: AbortSignal = new AbortController().signal, secrets: string[] = [SECRET]): TaskContext {
  return {
    taskId,
    tenant: 'acme',
    queue: 'default',
    attempt: 1,
    maxAttempts: 5,
    epoch: 1,
    signal,
    heartbeat: async () => {},
    signingSecrets: async () => secrets,
    log: silentLogger,
  };
}

function httpTask(options: Partial<HttpTaskOptions> = {}): TaskHandler {
  return createHttpTask({ allowPrivateTargets: true, ...options }) as unknown as TaskHandler;
}

/** Parses the payload as the consumer does, then runs one attempt. */
function deliver(payload: unknown, ctx: TaskContext = context('1'), handler: TaskHandler = httpTask()): Promise<unknown> {
  return handler.run(handler.payload.parse(payload), ctx);
}

async function failure(promise: Promise<unknown>): Promise<Error> {
  try {
    await promise;
  } catch (error) {
    expect(error).toBeInstanceOf(Error);
    return error as Error;
  }
  throw new Error('expected the attempt to fail, but it succeeded');
}

/** A plain Error: the consumer retries it with the task's backoff. */
function expectRetryWithBackoff(error: Error): void {
  expect(error).not.toBeInstanceOf(PermanentError);
  expect(error).not.toBeInstanceOf(RetryAfterError);
}

describe('the result of a delivery (issue 15)', () => {
  it('is the status, the content type and the body: JSON when it parses; what jsonb refuses stays text', async () => {
    await expect(deliver({ url: `${base}/json` })).resolves.toEqual({
      status: 201,
      headers: { 'content-type': 'application/json; charset=utf-8' },
      body: { id: 'r-1', nested: { ok: [1, 2] } },
    });
    // An escaped NUL parses, but jsonb would refuse it: the body is kept as text.
    await expect(deliver({ url: `${base}/json-nul` })).resolves.toEqual({
      status: 200,
      headers: { 'content-type': 'application/json' },
      body: '{"nul":"a\\u0000b"}',
    });
  });

  it('keeps at most 64 KiB of a body, cut so its JSON fits the result limit, with no NUL', async () => {
    const r = (await deliver({ url: `${base}/huge-ok` })) as { status: number; body: string };
    expect(r.status).toBe(200);
    expect(typeof r.body).toBe('string');
    expect(r.body).not.toContain('\u0000');
    expect(r.body.startsWith('"\uFFFDé"')).toBe(true);
    expect(resultText(r)).toMatchObject({ ok: true });
    expect(new TextEncoder().encode(JSON.stringify(r)).length).toBeLessThanOrEqual(MAX_RESULT_BYTES);
    expect(new TextEncoder().encode(r.body).length).toBeLessThanOrEqual(64 * 1024);
  });
});

describe('successful deliveries', () => {
  it('succeeds on 2xx with a signature the official package verifies', async () => {
    const body = { event: 'invoice.paid', amount: 4200, note: 'café ☕' };
    await expect(deliver({ url: `${base}/ok`, body, headers: { 'X-Tenant-Ref': 'abc' } }, context('1234'))).resolves.toEqual({
      status: 200,
      headers: { 'content-type': 'text/plain' },
      body: 'thanks',
    });
    expect(received).toHaveLength(1);
    const [request] = received;
    expect(request!.method).toBe('POST');
    expect(request!.body).toBe(JSON.stringify(body));
    expect(request!.headers['content-type']).toBe('application/json');
    expect(request!.headers['x-tenant-ref']).toBe('abc');
    expect(request!.headers['webhook-id']).toBe('1234');
    const timestamp = Number(request!.headers['webhook-timestamp']);
    expect(Math.abs(timestamp - Date.now() / 1000)).toBeLessThan(5);
    expect(new Webhook(SECRET).verify(request!.body, request!.headers as Record<string, string>)).toEqual(body);
    // ...and not with another key.
    expect(() =>
      new Webhook(`whsec_${btoa('some other key')}`).verify(request!.body, request!.headers as Record<string, string>),
    ).toThrow(/No matching signature/);
  });

  it('sends a string body as is, keeping the given content type, and signs those bytes', async () => {
    const body = 'name=café&x=1';
    await deliver({
      url: `${base}/accepted`,
      method: 'PUT',
      body,
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
    });
    const [request] = received;
    expect(request!.method).toBe('PUT');
    expect(request!.body).toBe(body);
    expect(request!.headers['content-type']).toBe('application/x-www-form-urlencoded');
    expect(() => new Webhook(SECRET).verify(request!.body, request!.headers as Record<string, string>, { jsonParse: false })).not.toThrow();
  });

  it('sends a GET without a body, still signed over the empty body', async () => {
    await deliver({ url: `${base}/ok?since=5`, method: 'GET' });
    const [request] = received;
    expect(request!.method).toBe('GET');
    expect(request!.path).toBe('/ok');
    expect(request!.body).toBe('');
    expect(() => new Webhook(SECRET).verify('', request!.headers as Record<string, string>)).not.toThrow();
  });

  it('sends no webhook headers when no signing secret is configured', async () => {
    await deliver({ url: `${base}/ok`, body: { a: 1 } }, context('9', undefined, []));
    const [request] = received;
    expect(Object.keys(request!.headers).filter((h) => h.startsWith('webhook-'))).toEqual([]);
  });

  it('keeps the webhook-id across retries of the same task', async () => {
    const payload = { url: `${base}/flaky`, body: { n: 1 } };
    const first = await failure(deliver(payload, { ...context('77'), attempt: 1 }));
    expect(first.message).toMatch(/^HTTP 500/);
    await expect(deliver(payload, { ...context('77'), attempt: 2 })).resolves.toEqual({ status: 204, headers: {}, body: '' });
    expect(received.map((r) => r.headers['webhook-id'])).toEqual(['77', '77']);
    for (const r of received) {
      expect(() => new Webhook(SECRET).verify(r.body, r.headers as Record<string, string>)).not.toThrow();
    }
  });
  it('hands fetch the attempt signal, manual redirects and the signed bytes', async () => {
    const calls: { url: string; init: RequestInit }[] = [];
    const fakeFetch = (async (url: string, init: RequestInit) => {
      calls.push({ url, init });
      return new Response(null, { status: 200 });
    }) as unknown as typeof fetch;
    const controller = new AbortController();
    const handler = httpTask({ fetch: fakeFetch, now: () => new Date('2026-03-01T12:00:00Z') });
    await deliver({ url: 'https://hooks.example.com/in', body: { a: 1 } }, context('5', controller.signal), handler);
    expect(calls).toHaveLength(1);
    const { url, init } = calls[0]!;
    expect(url).toBe('https://hooks.example.com/in');
    expect(init.method).toBe('POST');
    expect(init.redirect).toBe('manual');
    expect(init.signal).toBe(controller.signal);
    expect(new TextDecoder().decode(init.body as Uint8Array)).toBe('{"a":1}');
    const headers = new Headers(init.headers);
    expect(headers.get('webhook-timestamp')).toBe(String(Date.parse('2026-03-01T12:00:00Z') / 1000));
    // Signed at the injected instant, not the wall clock.
    await expect(
      verifyWebhook({ secret: SECRET, headers, body: '{"a":1}', now: new Date('2026-03-01T12:00:00Z') }),
    ).resolves.toBeUndefined();
  });
});

describe('failed deliveries', () => {
  it('retries a 500 with backoff, naming the status and a body excerpt', async () => {
    const error = await failure(deliver({ url: `${base}/fail` }));
    expectRetryWithBackoff(error);
    expect(error.message).toBe('HTTP 500 Internal Server Error: internal oops: database on fire');
  });

  it('retries a 503 after its Retry-After seconds', async () => {
    const error = await failure(deliver({ url: `${base}/busy` }));
    expect(error).toBeInstanceOf(RetryAfterError);
    expect((error as RetryAfterError).delayMs).toBe(7000);
    expect(error.message).toMatch(/^HTTP 503 Service Unavailable: come back later$/);
  });

  it('reads a Retry-After HTTP date against the injected clock', async () => {
    const handler = httpTask({ now: () => new Date('2026-03-01T12:00:00Z') });
    const error = await failure(deliver({ url: `${base}/busy-date` }, context('1'), handler));
    expect((error as RetryAfterError).delayMs).toBe(30_000);
  });

  it('caps a 429 Retry-After at one hour', async () => {
    const error = await failure(deliver({ url: `${base}/rate-limited` }));
    expect(error).toBeInstanceOf(RetryAfterError);
    expect((error as RetryAfterError).delayMs).toBe(3_600_000);
  });

  it('retries a 408', async () => {
    const error = await failure(deliver({ url: `${base}/request-timeout` }));
    expectRetryWithBackoff(error);
    expect(error.message).toMatch(/^HTTP 408/);
  });

  it('fails a 404 for good', async () => {
    const error = await failure(deliver({ url: `${base}/missing` }));
    expect(error).toBeInstanceOf(PermanentError);
    expect(error.message).toBe('HTTP 404 Not Found: {"error":"no such hook"}');
  });

  it('fails a 401 for good', async () => {
    const error = await failure(deliver({ url: `${base}/unauthorized` }));
    expect(error).toBeInstanceOf(PermanentError);
    expect(error.message).toMatch(/^HTTP 401/);
  });

  it('never follows a redirect, and names where it pointed', async () => {
    const error = await failure(deliver({ url: `${base}/redirect` }));
    expectRetryWithBackoff(error);
    expect(error.message).toBe(`HTTP 302: redirect to ${base}/landing not followed`);
    expect(received.map((r) => r.path)).toEqual(['/redirect']);
  });

  it('retries a network error, naming its cause', async () => {
    const closed = createServer();
    await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
    const port = (closed.address() as AddressInfo).port;
    await new Promise<void>((resolve) => closed.close(() => resolve()));
    const error = await failure(deliver({ url: `http://127.0.0.1:${port}/` }));
    expectRetryWithBackoff(error);
    expect(error.message).toMatch(/^request failed: .*ECONNREFUSED/);
  });

  it('stops promptly when the attempt times out', { timeout: 5000 }, async () => {
    const controller = new AbortController();
    const attempt = deliver({ url: `${base}/slow` }, context('1', controller.signal));
    const started = Date.now();
    setTimeout(() => controller.abort(new Error('timed out after 100 ms')), 100);
    const error = await failure(attempt);
    expect(Date.now() - started).toBeLessThan(2000);
    expectRetryWithBackoff(error);
    expect(error.message).toBe('request aborted: timed out after 100 ms');
    expect(received.map((r) => r.path)).toEqual(['/slow']);
  });

  it('keeps only a short excerpt of a huge response body', async () => {
    const error = await failure(deliver({ url: `${base}/huge` }));
    expectRetryWithBackoff(error);
    expect(error.message).toMatch(/^HTTP 500 Internal Server Error: x+…$/);
    const excerpt = error.message.slice('HTTP 500 Internal Server Error: '.length);
    expect(excerpt.length).toBeLessThanOrEqual(256);
    expect(excerpt.length).toBeGreaterThan(200);
  });
});

describe('payload checks', () => {
  const guarded = () => createHttpTask({ allowPrivateTargets: false });

  it('refuses caller-set client-address and proxy headers, naming each', () => {
    const handler = guarded();
    const forged = ['Forwarded', 'X-Forwarded-For', 'x-forwarded-host', 'X-Real-IP', 'True-Client-IP', 'CF-Connecting-IP', 'cf-ipcountry'];
    const parsed = handler.payload.safeParse({ url: 'https://example.com/', headers: Object.fromEntries(forged.map((h) => [h, '1.2.3.4'])) });
    expect(parsed.success).toBe(false);
    expect(parsed.error!.issues.map((i) => i.path.join('.'))).toEqual(forged.map((h) => `headers.${h}`));
    expect(handler.payload.safeParse({ url: 'https://example.com/', headers: { 'X-Forwarding-Note': 'ok', 'X-Request-Id': 'a' } }).success).toBe(true);
  });

  it('refuses a port other than 80, 443 and the configured ones at enqueue time', () => {
    expect(guarded().payload.safeParse({ url: 'https://example.com:8443/' }).success).toBe(false);
    expect(createHttpTask({ allowPrivateTargets: false, allowedPorts: [8443] }).payload.safeParse({ url: 'https://example.com:8443/' }).success).toBe(true);
  });

  it('refuses a hostile URL at enqueue time, naming payload.url', () => {
    const handler = guarded();
    for (const url of ['http://169.254.169.254/latest/meta-data/', 'http://0x7f.1/', 'http://[::ffff:127.0.0.1]/', 'file:///etc/passwd']) {
      const parsed = handler.payload.safeParse({ url });
      expect(parsed.success).toBe(false);
      expect(parsed.error!.issues.map((i) => i.path.join('.'))).toEqual(['url']);
    }
    const registry = createRegistry([handler]);
    let thrown: unknown;
    try {
      registry.validate('http', { url: 'http://localhost:8080/' });
    } catch (error) {
      thrown = error;
    }
    expect(thrown).toBeInstanceOf(AppError);
    expect((thrown as AppError).code).toBe('invalid_request');
    expect((thrown as AppError).details).toEqual([{ path: 'payload.url', message: expect.stringMatching(/localhost/) }]);
  });

  it('accepts a public URL and fills in the method', () => {
    const parsed = guarded().payload.safeParse({ url: 'https://hooks.example.com/in', body: { a: [1, null] } });
    expect(parsed).toMatchObject({ success: true, data: { url: 'https://hooks.example.com/in', method: 'POST' } });
  });

  it('refuses headers the transport or the signer owns, and malformed ones', () => {
    const handler = guarded();
    const paths = (headers: Record<string, string>) => {
      const parsed = handler.payload.safeParse({ url: 'https://example.com/', headers });
      return parsed.success ? [] : parsed.error.issues.map((i) => i.path.join('.'));
    };
    expect(paths({ Host: 'evil.example' })).toEqual(['headers.Host']);
    expect(paths({ 'Content-Length': '5' })).toEqual(['headers.Content-Length']);
    expect(paths({ 'Transfer-Encoding': 'chunked' })).toEqual(['headers.Transfer-Encoding']);
    expect(paths({ 'webhook-signature': 'v1,forged' })).toEqual(['headers.webhook-signature']);
    expect(paths({ 'Webhook-Id': 'x' })).toEqual(['headers.Webhook-Id']);
    expect(paths({ 'x-bad': 'a\r\nInjected: yes' })).toEqual(['headers.x-bad']);
    expect(paths({ 'bad name': 'x' })).toEqual(['headers.bad name']);
    expect(paths({ 'X-A': '1', 'x-a': '2' })).toEqual(['headers.x-a']);
    expect(paths({ Authorization: 'Bearer t', 'X-Custom': 'ok' })).toEqual([]);
    // fetch sends header values as bytes: past U+00FF it throws on every attempt, before sending.
    expect(() => new Headers({ 'x-a': 'café ☃' })).toThrow();
    expect(paths({ 'x-a': 'café ☃' })).toEqual(['headers.x-a']);
    expect(paths({ 'x-a': 'caf\ud800' })).toEqual(['headers.x-a']);
    expect(paths({ 'x-a': 'café\tÿ' })).toEqual([]);
    expect(() => new Headers({ 'x-a': 'café\tÿ' })).not.toThrow();
  });

  it('refuses a body on GET and HEAD, unknown fields and unknown methods', () => {
    const handler = guarded();
    const issues = (payload: unknown) => {
      const parsed = handler.payload.safeParse(payload);
      return parsed.success ? [] : parsed.error.issues.map((i) => `${i.code}:${i.path.join('.')}`);
    };
    expect(issues({ url: 'https://example.com/', method: 'GET', body: 'x' })).toEqual(['custom:body']);
    expect(issues({ url: 'https://example.com/', method: 'HEAD', body: { a: 1 } })).toEqual(['custom:body']);
    expect(issues({ url: 'https://example.com/', method: 'CONNECT' })).toEqual(['invalid_value:method']);
    expect(issues({ url: 'https://example.com/', timeout: 5 })).toEqual(['unrecognized_keys:']);
    expect(issues({ url: `https://example.com/${'a'.repeat(2100)}` })).toEqual(['too_big:url']);
  });

  it('checks the URL again at run time and never contacts a refused target', async () => {
    const handler = guarded() as unknown as TaskHandler;
    const error = await failure(handler.run({ url: `${base}/ok`, method: 'POST' }, context('1')));
    expect(error).toBeInstanceOf(PermanentError);
    expect(error.message).toMatch(/^target refused: .*loopback/);
    expect(received).toEqual([]);
  });

});

describe('retryAfterMs', () => {
  const now = new Date('2026-03-01T12:00:00Z');
  it.each([
    [null, null],
    ['0', 0],
    [' 12 ', 12_000],
    ['Sun, 01 Mar 2026 12:01:00 GMT', 60_000],
    ['Sun, 01 Mar 2026 11:00:00 GMT', 0],
    ['99999999', 3_600_000],
    ['soon', null],
    ['-5', null],
    ['1.5', null],
    ['2026', 2_026_000],
    ['Sun, 01 Mar 2026', null],
    ['Sunday, 01-Mar-26 12:00:10 GMT', 10_000],
  ])('reads %j as %j ms', (value, expected) => {
    expect(retryAfterMs(value, now)).toBe(expected);
  });
});
