// Turns the collected results into the table printed on stdout (and pasted
// into BENCHMARKS.md), with every target judged beside its figure, met or
// not met. Targets are reported, never asserted.
import { fmt1, fmt2, fmtInt, summarize, type Summary } from './stats.ts';

export interface Row {
  workload: string;
  project: string;
  pgboss: string;
  graphile: string;
  target: string;
  verdict: string;
}

export const range = (s: Summary | undefined, f: (n: number) => string = fmtInt): string =>
  !s || !Number.isFinite(s.median) ? 'n/a' : s.runs.length > 1 ? `${f(s.median)} (${f(s.min)}–${f(s.max)})` : f(s.median);

export const verdict = (met: boolean | undefined): string => (met === undefined ? 'n/a' : met ? 'met' : 'not met');

/** Ratio of two medians, or undefined when either is missing. */
export function ratio(a: Summary | undefined, b: Summary | undefined): number | undefined {
  if (!a || !b || !Number.isFinite(a.median) || !Number.isFinite(b.median) || b.median === 0) return undefined;
  return a.median / b.median;
}

/**
 * The ratio of two series run in pairs (the i-th of `a` beside the i-th of
 * `b`, back to back): each pair's ratio, summarized. A drift of the shared
 * machine's speed between repetitions moves both of a pair alike, so these
 * spread less than the rates themselves.
 */
export function pairedRatios(a: readonly { rate: number }[] | undefined, b: readonly { rate: number }[] | undefined): Summary | undefined {
  if (!a || !b || a.length === 0 || a.length !== b.length) return undefined;
  return summarize(a.map((r, i) => r.rate / b[i]!.rate));
}

export const x = (r: number | undefined) => (r === undefined || !Number.isFinite(r) ? 'n/a' : `${fmt2(r)}x`);

export function renderTable(rows: readonly Row[]): string {
  const header: Row = { workload: 'workload', project: 'this project', pgboss: 'pg-boss', graphile: 'graphile-worker', target: 'target', verdict: '' };
  const esc = (s: string) => s.replace(/\|/g, '\\|');
  const lines = [header, ...rows].map((r) => `| ${[r.workload, r.project, r.pgboss, r.graphile, r.target, r.verdict].map(esc).join(' | ')} |`);
  lines.splice(1, 0, '|---|---|---|---|---|---|');
  return lines.join('\n');
}

export { fmt1, fmt2, fmtInt };
