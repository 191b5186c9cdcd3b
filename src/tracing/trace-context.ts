// W3C Trace Context (https://www.w3.org/TR/trace-context/): the parts this
// service uses. A task keeps the traceparent and tracestate of the request
// that enqueued it; each http delivery sends a child traceparent (same trace
// id and flags, a new parent id), and log lines carry the trace id, so a
// tracing backend (Cloudflare's Workers traces, any OpenTelemetry collector)
// joins the enqueue, the delivery and the receiver's own spans.

export interface TraceContext {
  /** `00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>`, normalised to lower case. */
  traceparent: string;
  /** Vendor state, passed on unchanged; null when absent or unusable. */
  tracestate: string | null;
}

const TRACEPARENT = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$/;
/** The spec's limit is 32 list members; 512 characters covers them and bounds what is stored. */
export const MAX_TRACESTATE_CHARS = 512;

/**
 * The trace context of incoming headers, or null. Per the spec an invalid
 * traceparent is ignored (never an error): version ff, an all-zero trace or
 * parent id, or a version 00 header with trailing data. tracestate without a
 * valid traceparent is dropped; one too long or with characters outside
 * printable ASCII is dropped alone.
 */
export function readTraceContext(traceparent: string | null | undefined, tracestate: string | null | undefined): TraceContext | null {
  const tp = (traceparent ?? '').trim().toLowerCase();
  const m = TRACEPARENT.exec(tp);
  if (!m) return null;
  const [, version, traceId, parentId, flags, rest] = m;
  if (version === 'ff' || /^0+$/.test(traceId!) || /^0+$/.test(parentId!)) return null;
  if (version === '00' && rest !== undefined) return null;
  const state = (tracestate ?? '').trim();
  const usableState = state.length > 0 && state.length <= MAX_TRACESTATE_CHARS && /^[\x20-\x7e]+$/.test(state) ? state : null;
  // A newer version is read as version 00 (its first four fields), as the spec says.
  return { traceparent: `00-${traceId}-${parentId}-${flags}`, tracestate: usableState };
}

export function traceIdOf(traceparent: string): string {
  return traceparent.slice(3, 35);
}

function randomParentId(): string {
  const bytes = crypto.getRandomValues(new Uint8Array(8));
  if (bytes.every((b) => b === 0)) bytes[7] = 1;
  return [...bytes].map((b) => b.toString(16).padStart(2, '0')).join('');
}

/** A child of `traceparent`: the same trace id and flags, a fresh parent id (this delivery's span). */
export function childTraceparent(traceparent: string): string {
  return `00-${traceIdOf(traceparent)}-${randomParentId()}-${traceparent.slice(53, 55)}`;
}
