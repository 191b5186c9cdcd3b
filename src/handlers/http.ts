// The built-in `http` task type (DESIGN §10): one signed HTTP request per
// attempt. The payload is checked at enqueue time (a hostile URL or a header
// we must own is a 400 naming the field, not a task that dies later) and the
// URL again at run time, since the guard's rules may have tightened between
// enqueue and run.
//
// Outcomes follow what a retry can change: 2xx succeeds; 408, 429, 5xx and
// network errors retry (honouring Retry-After); other 4xx will not change on
// a retry and are permanent. Redirects are never followed: the guard checked
// this URL, not wherever a Location points, so a 3xx is a failed attempt.
import { z } from 'zod';
import { PermanentError, RetryAfterError } from './errors.ts';
import { defineTask, type TaskHandler } from './registry.ts';
import { resultText } from '../tasks/attempts.ts';
import { signWebhook } from '../../packages/client/src/webhooks.ts';
import { childTraceparent } from '../tracing/trace-context.ts';
import { checkTarget } from './ssrf.ts';

export interface HttpTaskOptions {
  /** Lets URLs reach loopback and private networks, on any port (ALLOW_PRIVATE_TARGETS; local development). */
  allowPrivateTargets: boolean;
  /** Ports allowed besides 80 and 443 (ALLOWED_TARGET_PORTS). */
  allowedPorts?: readonly number[];
  fetch?: typeof fetch;
  /** The clock for webhook-timestamp and Retry-After dates; injectable for tests. */
  now?: () => Date;
}

export const HTTP_METHODS = ['GET', 'POST', 'PUT', 'PATCH', 'DELETE', 'HEAD'] as const;

/** Longest URL accepted; beyond it many servers and proxies answer 414. */
const MAX_URL_LENGTH = 2048;
/** lastError carries at most this much of a response body. */
const MAX_EXCERPT_CHARS = 256;
/** Enough bytes for 256 characters of UTF-8; the rest of a body is never read. */
const MAX_RESPONSE_READ_BYTES = 1024;
/** A Retry-After further away than this is clamped (a receiver cannot park a task for days). */
const MAX_RETRY_AFTER_MS = 60 * 60 * 1000;

/**
 * Headers the payload may not set: the transport's own (fetch computes them,
 * and some runtimes throw on them), and the signature headers, which only the
 * signer writes.
 */
const FORBIDDEN_HEADERS = new Set([
  'host',
  'content-length',
  'transfer-encoding',
  'connection',
  'keep-alive',
  'upgrade',
  'te',
  'trailer',
  'expect',
  'proxy-authorization',
  'proxy-connection',
]);
const FORBIDDEN_HEADER_PREFIXES = ['webhook-', 'proxy-', 'sec-'];
/**
 * Headers that claim where a request came from, or that Cloudflare sets on
 * its way through: a receiver (or a proxy in front of it) may trust them for
 * access control or rate limits, so a tenant may not forge them.
 */
const NETWORK_HEADERS = new Set(['forwarded', 'x-real-ip', 'true-client-ip']);
const NETWORK_HEADER_PREFIXES = ['x-forwarded-', 'cf-'];

/** RFC 9110 token characters: what a header name may contain. */
const HEADER_NAME = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
/**
 * Header values: bytes, as fetch sends them (a ByteString: no character past
 * U+00FF, or every attempt throws before sending), and no CR, LF or NUL
 * (fetch would throw, or worse, a header could be injected).
 */
const HEADER_VALUE = /^[^\r\n\0\u0100-\uffff]*$/;

function headerNameProblem(name: string): string | null {
  if (!HEADER_NAME.test(name)) return 'not a valid header name';
  const lower = name.toLowerCase();
  if (FORBIDDEN_HEADERS.has(lower)) return 'this header is set by the transport and may not be given';
  if (NETWORK_HEADERS.has(lower) || NETWORK_HEADER_PREFIXES.some((p) => lower.startsWith(p))) {
    return 'client-address and proxy headers (Forwarded, X-Forwarded-*, X-Real-IP, True-Client-IP, CF-*) are set by the network, not the caller';
  }
  if (FORBIDDEN_HEADER_PREFIXES.some((p) => lower.startsWith(p))) {
    return lower.startsWith('webhook-') ? 'webhook-* headers are set by the signer' : 'this header may not be given';
  }
  return null;
}

/** The payload schema; the URL refinement depends on whether private targets are allowed. */
export function createHttpPayloadSchema(options: { allowPrivateTargets: boolean; allowedPorts?: readonly number[] }) {
  const headers = z.record(z.string(), z.string()).superRefine((value, ctx) => {
    const seen = new Set<string>();
    for (const [name, headerValue] of Object.entries(value)) {
      const problem = headerNameProblem(name);
      if (problem) ctx.addIssue({ code: 'custom', path: [name], message: problem });
      if (!HEADER_VALUE.test(headerValue)) {
        ctx.addIssue({ code: 'custom', path: [name], message: 'header values may hold only characters up to U+00FF, and no CR, LF or NUL' });
      }
      // {"X-A": ..., "x-a": ...} would be merged by fetch into one header.
      if (seen.has(name.toLowerCase())) ctx.addIssue({ code: 'custom', path: [name], message: 'header given twice' });
      seen.add(name.toLowerCase());
    }
  });
  return z
    .strictObject({
      url: z
        .string()
        .max(MAX_URL_LENGTH)
        .superRefine((url, ctx) => {
          const check = checkTarget(url, { allowPrivate: options.allowPrivateTargets, allowedPorts: options.allowedPorts });
          if (!check.ok) ctx.addIssue({ code: 'custom', message: check.reason });
        }),
      method: z.enum(HTTP_METHODS).default('POST'),
      headers: headers.optional(),
      /** A string is sent as is; any other JSON value is sent JSON-encoded. */
      body: z.json().optional(),
    })
    .superRefine((payload, ctx) => {
      if (payload.body !== undefined && (payload.method === 'GET' || payload.method === 'HEAD')) {
        ctx.addIssue({ code: 'custom', path: ['body'], message: `a ${payload.method} request cannot have a body` });
      }
    });
}

export function createHttpTask(options: HttpTaskOptions): TaskHandler<never> {
  const fetchImpl = options.fetch ?? ((input, init) => fetch(input, init));
  const now = options.now ?? (() => new Date());

  return defineTask('http', createHttpPayloadSchema(options), async (payload, ctx) => {
    const target = checkTarget(payload.url, { allowPrivate: options.allowPrivateTargets, allowedPorts: options.allowedPorts });
    if (!target.ok) throw new PermanentError(`target refused: ${target.reason}`);

    const headers = new Headers(payload.headers);
    let body: Uint8Array | undefined;
    if (payload.body !== undefined) {
      const isText = typeof payload.body === 'string';
      // Encoded once, so the signature covers exactly the bytes on the wire.
      body = new TextEncoder().encode(isText ? (payload.body as string) : JSON.stringify(payload.body));
      if (!headers.has('content-type')) headers.set('content-type', isText ? 'text/plain; charset=utf-8' : 'application/json');
    }
    // W3C trace context: this delivery is a child span of the enqueue request's trace
    // (unless the payload set its own traceparent).
    if (ctx.trace && !headers.has('traceparent')) {
      headers.set('traceparent', childTraceparent(ctx.trace.traceparent));
      if (ctx.trace.tracestate && !headers.has('tracestate')) headers.set('tracestate', ctx.trace.tracestate);
    }
    // The tenant's own secrets (both during a rotation): no tenant can sign for another.
    const secrets = await ctx.signingSecrets();
    if (secrets.length > 0) {
      const signed = await signWebhook({
        secret: secrets,
        id: ctx.webhookId ?? ctx.taskId,
        timestamp: now(),
        body: body ?? new Uint8Array(0),
      });
      for (const [name, value] of Object.entries(signed)) headers.set(name, value);
    }

    let response: Response;
    try {
      response = await fetchImpl(target.url.href, {
        method: payload.method,
        headers,
        body,
        redirect: 'manual',
        signal: ctx.signal,
      });
    } catch (error) {
      // Network errors and timeouts retry: the next attempt may well connect.
      if (ctx.signal.aborted) throw new Error(`request aborted: ${messageWithCause(ctx.signal.reason)}`, { cause: error });
      throw new Error(`request failed: ${messageWithCause(error)}`, { cause: error });
    }

    const status = response.status;
    if (status >= 200 && status < 300) return await httpResult(response);
    if (status >= 300 && status < 400) {
      discard(response);
      const location = response.headers.get('location');
      throw withStatus(
        new Error(
          location === null
            ? `HTTP ${status}: redirect not followed (no Location)`
            : `HTTP ${status}: redirect to ${truncate(location, MAX_EXCERPT_CHARS)} not followed`,
        ),
        status,
      );
    }

    const excerpt = await readExcerpt(response);
    const message = `HTTP ${status}${response.statusText ? ` ${response.statusText}` : ''}${excerpt ? `: ${excerpt}` : ''}`;
    if (status === 408 || status === 429 || status >= 500) {
      const delayMs = retryAfterMs(response.headers.get('retry-after'), now());
      throw withStatus(delayMs === null ? new Error(message) : new RetryAfterError(message, delayMs), status);
    }
    if (status >= 400) throw withStatus(new PermanentError(message), status);
    // An informational 1xx leaking through, or a browser's opaque 0: nothing says a retry cannot help.
    throw withStatus(new Error(message), status);
  });
}

/** The response status, for the attempt history (read by the consumer as `httpStatus`). */
function withStatus<E extends Error>(error: E, status: number): E {
  return Object.assign(error, { httpStatus: status });
}

/** The most of a 2xx response body kept as the task's result. */
export const MAX_RESULT_BODY_BYTES = 64 * 1024;

export interface HttpTaskResult {
  status: number;
  headers: { 'content-type'?: string };
  /** The body (at most 64 KiB of it) as JSON when it parses, else as text. */
  body: unknown;
}

/**
 * The http task's result: the status, the content type, and at most 64 KiB of
 * the body, as JSON when it parses, as text otherwise. A body whose JSON text
 * would pass the 64 KiB result limit (escapes) is kept as text, cut to fit.
 */
async function httpResult(response: Response): Promise<HttpTaskResult> {
  const { bytes, complete } = await readBody(response, MAX_RESULT_BODY_BYTES);
  const type = response.headers.get('content-type');
  // NUL cannot be stored (jsonb); invalid UTF-8 already decodes to U+FFFD.
  const text = new TextDecoder().decode(bytes, { stream: !complete }).replaceAll('\u0000', '\uFFFD');
  const headers = type === null ? {} : { 'content-type': type };
  let body: unknown = text;
  if (complete && text.trim() !== '') {
    try {
      body = JSON.parse(text);
      // JSON jsonb would refuse (an escaped NUL or lone surrogate, deep nesting) is kept as text.
      if (!resultText(body).ok) body = text;
    } catch {
      // not JSON: kept as text
    }
  }
  const room = MAX_RESULT_BODY_BYTES - 512; // the status, the content type and the braces
  const size = (v: unknown) => new TextEncoder().encode(JSON.stringify(v)).length;
  if (size(body) > room) {
    body = text;
    let cut = text;
    while (cut.length > 0 && size(cut) > room) cut = cut.slice(0, Math.floor(cut.length * 0.9));
    body = cut;
  }
  return { status: response.status, headers, body };
}

/** Reads at most `max` bytes of a body and cancels the rest. */
async function readBody(response: Response, max: number): Promise<{ bytes: Uint8Array; complete: boolean }> {
  if (!response.body) return { bytes: new Uint8Array(0), complete: true };
  const reader = response.body.getReader();
  const chunks: Uint8Array[] = [];
  let total = 0;
  let complete = false;
  try {
    while (total < max) {
      const { done, value } = await reader.read();
      if (done) {
        complete = true;
        break;
      }
      const chunk = value.subarray(0, max - total);
      chunks.push(chunk);
      total += chunk.length;
    }
  } catch {
    // A body that breaks off mid-read still leaves what arrived.
  } finally {
    reader.cancel().catch(() => {});
  }
  const bytes = new Uint8Array(total);
  let offset = 0;
  for (const chunk of chunks) {
    bytes.set(chunk, offset);
    offset += chunk.length;
  }
  return { bytes, complete };
}

/** Retry-After as delta-seconds or an HTTP date, clamped to [0, 1 hour]; null when absent or unreadable. */
export function retryAfterMs(value: string | null, now: Date): number | null {
  if (value === null) return null;
  const text = value.trim();
  let ms: number;
  if (/^\d+$/.test(text)) ms = Number(text) * 1000;
  else {
    // Date.parse alone would read "-5" or "1.5" as years: insist on an HTTP date's shape
    // (IMF-fixdate, RFC 850 or asctime all start with the weekday and carry hh:mm:ss).
    if (!/^(mon|tue|wed|thu|fri|sat|sun)[a-z]*,? .*\b\d{2}:\d{2}:\d{2}\b/i.test(text)) return null;
    const date = Date.parse(text);
    if (Number.isNaN(date)) return null;
    ms = date - now.getTime();
  }
  return Math.min(Math.max(ms, 0), MAX_RETRY_AFTER_MS);
}

/** Reads at most MAX_RESPONSE_READ_BYTES and cancels the rest: a receiver cannot make us buffer megabytes. */
async function readExcerpt(response: Response): Promise<string> {
  // A body that breaks off mid-read still leaves the status to report.
  const { bytes } = await readBody(response, MAX_RESPONSE_READ_BYTES);
  // stream: true drops a multi-byte character cut at the byte limit instead of mangling it.
  const text = new TextDecoder().decode(bytes, { stream: true });
  return truncate(text.replace(/[\u0000-\u001f\u007f]+/g, ' ').replace(/\s+/g, ' ').trim(), MAX_EXCERPT_CHARS);
}

/** Releases the connection without reading a body nobody needs. */
function discard(response: Response): void {
  response.body?.cancel().catch(() => {});
}

function truncate(text: string, max: number): string {
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}

function messageWithCause(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  // undici's "fetch failed" hides the reason (ECONNREFUSED, ENOTFOUND...) in `cause`.
  const cause = error.cause instanceof Error ? `: ${error.cause.message}` : '';
  return `${error.message}${cause}`;
}
