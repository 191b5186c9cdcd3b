// Strings and shapes Postgres cannot store, refused before anything else reads
// the body (issue 10, finding 6): NUL (text and jsonb have no U+0000), lone
// UTF-16 surrogates (not representable in UTF-8; jsonb refuses the escape,
// text would silently store U+FFFD), and nesting deeper than MAX_JSON_DEPTH
// (zod's recursive schemas overflow the stack near 2,000 levels, Postgres'
// jsonb parser near a few thousand). Each is a 400 naming the field.
//
// Cost: a search for `\u`, a well-formedness check and one bracket count over
// the body text (0.9 ms for a 1,000-task batch of 237 kB, where JSON.parse
// takes 1.1 ms); only a body that may hold one of these (an escaped NUL or
// surrogate, or deep brackets, possibly inside strings) is parsed a second
// time and walked to find the field.
import type { MiddlewareHandler } from 'hono';
import { invalid, type ErrorDetail } from '../errors.ts';
import type { AppEnv } from './context.ts';

/** How deep a request body may nest (objects and arrays, the body itself counting as 1). */
export const MAX_JSON_DEPTH = 128;
/** An error path longer than this many segments is cut (a deep path is not worth 20,000 segments). */
const MAX_PATH_SEGMENTS = 8;
const MAX_SEGMENT_CHARS = 64;

const LONE_SURROGATE = /\p{Cs}/u;
/** An escaped NUL or surrogate in JSON text (a false alarm, e.g. `\\u0000`, only costs the precise check). */
const SUSPICIOUS_ESCAPE = /\\u(0000|d[89a-f][0-9a-f]{2})/i;
const JSON_MEDIA_TYPE = /^application\/([\w.-]+\+)?json$/i;

/** String.prototype.isWellFormed (ES2024: workerd, Node 20+) is ten times faster than the regular expression. */
const isWellFormed = (text: string): boolean => {
  const native = (text as { isWellFormed?: () => boolean }).isWellFormed;
  return typeof native === 'function' ? native.call(text) : !LONE_SURROGATE.test(text);
};

/** Why a string cannot be stored, or null. */
export function textProblem(text: string): string | null {
  if (text.includes('\u0000')) return 'may not contain NUL (\\u0000)';
  if (!isWellFormed(text)) return 'may not contain a lone UTF-16 surrogate';
  return null;
}

/** For zod refinements of strings outside JSON bodies (path and query parameters). */
export const isStorableText = (text: string) => textProblem(text) === null;

/** True when the text may hold an escaped NUL or surrogate or nest too deep; false means it certainly does not. */
export function mayBeHostile(text: string, maxDepth = MAX_JSON_DEPTH): boolean {
  // Escapes first (a body without `\u` has none), then raw characters: a body
  // decoded from bytes holds no lone surrogate, but an in-process one may.
  if (text.includes('\\u') && SUSPICIOUS_ESCAPE.test(text)) return true;
  if (text.includes('\u0000') || !isWellFormed(text)) return true;
  let depth = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x7b || c === 0x5b) {
      if (++depth > maxDepth) return true;
    } else if (c === 0x7d || c === 0x5d) depth--;
  }
  return false;
}

const segment = (key: string | number) => {
  const s = String(key);
  return s.length > MAX_SEGMENT_CHARS ? `${s.slice(0, MAX_SEGMENT_CHARS - 1)}…` : s;
};
const pathOf = (path: readonly (string | number)[]) => {
  const shown = path.slice(0, MAX_PATH_SEGMENTS).map(segment).join('.');
  return (path.length > MAX_PATH_SEGMENTS ? `${shown}.…` : shown) || 'body';
};

/**
 * The first string or key that cannot be stored, or the first place nested
 * deeper than `maxDepth`. Iterative: a 20,000-deep value does not overflow.
 */
export function findHostileJson(value: unknown, maxDepth = MAX_JSON_DEPTH): ErrorDetail | null {
  const stack: { value: unknown; path: (string | number)[] }[] = [{ value, path: [] }];
  while (stack.length > 0) {
    const { value: v, path } = stack.pop()!;
    if (typeof v === 'string') {
      const problem = textProblem(v);
      if (problem) return { path: pathOf(path), message: problem };
      continue;
    }
    if (typeof v !== 'object' || v === null) continue;
    if (path.length >= maxDepth) return { path: pathOf(path), message: `nested deeper than ${maxDepth} levels` };
    if (Array.isArray(v)) {
      for (let i = v.length - 1; i >= 0; i--) stack.push({ value: v[i], path: [...path, i] });
      continue;
    }
    const entries = Object.entries(v);
    for (let i = entries.length - 1; i >= 0; i--) {
      const [key, child] = entries[i]!;
      const problem = textProblem(key);
      if (problem) return { path: pathOf([...path, key]), message: `field name ${problem}` };
      stack.push({ value: child, path: [...path, key] });
    }
  }
  return null;
}

/**
 * Refuses a JSON request body holding what findHostileJson finds, with a 400
 * naming the field, before validation (whose recursive schemas would
 * overflow) and before any statement. Malformed JSON is left to the validator.
 */
export function refuseHostileJson(): MiddlewareHandler<AppEnv> {
  return async (c, next) => {
    const type = c.req.header('content-type')?.split(';')[0]?.trim() ?? '';
    if (c.req.method !== 'GET' && c.req.method !== 'HEAD' && JSON_MEDIA_TYPE.test(type)) {
      // Cached by Hono: the validator's json() parses this same text.
      const text = await c.req.text();
      if (mayBeHostile(text)) {
        let parsed: unknown;
        let ok = true;
        try {
          parsed = JSON.parse(text);
        } catch {
          ok = false;
        }
        const found = ok ? findHostileJson(parsed) : null;
        if (found) throw invalid(`${found.path}: ${found.message}`, [found]);
      }
    }
    await next();
  };
}
