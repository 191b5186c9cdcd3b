// What one attempt leaves behind (issue 15): its error for the attempt
// history (name and message, at most 2 KiB together) and its handler's return
// value as the task's `result` (any JSON, at most 64 KiB).
import { MAX_JSON_DEPTH, textProblem } from '../http/hostile-json.ts';

/** The most a task's result may take, as JSON text in UTF-8. */
export const MAX_RESULT_BYTES = 64 * 1024;
/** The most an attempt's error name and message take together, in UTF-8. */
export const MAX_ATTEMPT_ERROR_BYTES = 2048;

/**
 * The length of `text` in UTF-8, as TextEncoder would encode it (a lone
 * surrogate as U+FFFD, 3 bytes), counted without encoding it: the enqueue
 * measures every payload with it.
 */
export function utf8Length(text: string): number {
  let n = text.length;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c < 0x80) continue;
    if (c < 0x800) n += 1;
    else if (c >= 0xd800 && c <= 0xdbff && i + 1 < text.length && (text.charCodeAt(i + 1) & 0xfc00) === 0xdc00) {
      n += 2; // a pair: 4 bytes for its 2 code units
      i++;
    } else n += 2;
  }
  return n;
}

/** Text Postgres can store: NUL and lone surrogates replaced by U+FFFD. */
function storable(text: string): string {
  const wellFormed = (text as { toWellFormed?: () => string }).toWellFormed?.call(text) ?? text.replace(/\p{Cs}/gu, '\uFFFD');
  return wellFormed.includes('\u0000') ? wellFormed.replaceAll('\u0000', '\uFFFD') : wellFormed;
}

/** Cuts `text` to at most `bytes` bytes of UTF-8 (whole characters, with an ellipsis when cut). */
function cutToBytes(text: string, bytes: number): string {
  if (utf8Length(text) <= bytes) return text;
  let out = '';
  let used = 0;
  for (const ch of text) {
    const n = utf8Length(ch);
    if (used + n > bytes - 3) break; // room for the ellipsis (3 bytes)
    out += ch;
    used += n;
  }
  return `${out}…`;
}

/** The error of an attempt as the history shows it: name and message, at most 2 KiB together. */
export function attemptError(error: unknown): { name: string; message: string } {
  const name = storable(cutToBytes(error instanceof Error ? error.name || 'Error' : 'Error', 128));
  const message = storable(error instanceof Error ? error.message : String(error));
  return { name, message: cutToBytes(message, MAX_ATTEMPT_ERROR_BYTES - utf8Length(name)) };
}

/** Why the stored JSON would be refused by Postgres (a NUL, a lone surrogate, too deep), or null. */
function jsonProblem(value: unknown, depth: number): string | null {
  if (typeof value === 'string') return textProblem(value);
  if (value === null || typeof value !== 'object') return null;
  if (depth > MAX_JSON_DEPTH) return `nests deeper than ${MAX_JSON_DEPTH} levels`;
  for (const [k, v] of Object.entries(value)) {
    const p = (Array.isArray(value) ? null : textProblem(k)) ?? jsonProblem(v, depth + 1);
    if (p) return p;
  }
  return null;
}

/**
 * The handler's return value as JSON text, or why it cannot be stored.
 * `undefined` (a handler that returns nothing) stores no result.
 */
export function resultText(value: unknown): { ok: true; text: string | null } | { ok: false; message: string } {
  if (value === undefined) return { ok: true, text: null };
  let text: string | undefined;
  try {
    text = JSON.stringify(value);
  } catch (error) {
    return { ok: false, message: `the handler's result is not JSON: ${error instanceof Error ? error.message : String(error)}` };
  }
  if (text === undefined) return { ok: true, text: null }; // a function or a symbol: nothing to store
  const bytes = utf8Length(text);
  if (bytes > MAX_RESULT_BYTES) {
    return { ok: false, message: `the handler's result is ${bytes} bytes of JSON; the limit is ${MAX_RESULT_BYTES}` };
  }
  // Only text that may hold what jsonb refuses is walked (an escaped NUL or
  // surrogate, or many brackets).
  if (/\\u(0000|d[89a-f][0-9a-f]{2})/i.test(text) || (text.match(/[[{]/g)?.length ?? 0) > MAX_JSON_DEPTH) {
    const problem = jsonProblem(JSON.parse(text), 1);
    if (problem) return { ok: false, message: `the handler's result cannot be stored: a value ${problem}` };
  }
  return { ok: true, text };
}

/** Thrown (as the attempt's error) when a result cannot be stored; the attempt fails. */
export class ResultError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ResultError';
  }
}
