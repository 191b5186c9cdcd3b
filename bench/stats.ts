// Small numeric helpers: repetitions summarised as median and spread,
// percentiles of latency samples, and a progress line on stderr.

export interface Summary {
  median: number;
  min: number;
  max: number;
  runs: number[];
}

export function summarize(runs: readonly number[]): Summary {
  if (runs.length === 0) return { median: NaN, min: NaN, max: NaN, runs: [] };
  const sorted = [...runs].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  const median = sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
  return { median, min: sorted[0]!, max: sorted.at(-1)!, runs: [...runs] };
}

/** Nearest-rank percentile (p in 0..100) of unsorted samples. */
export function percentile(samples: readonly number[], p: number): number {
  if (samples.length === 0) return NaN;
  const sorted = [...samples].sort((a, b) => a - b);
  const rank = Math.min(sorted.length, Math.max(1, Math.ceil((p / 100) * sorted.length)));
  return sorted[rank - 1]!;
}

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

const started = Date.now();

/** One progress line on stderr, prefixed with the time since the bench began. */
export function progress(line: string): void {
  const s = ((Date.now() - started) / 1000).toFixed(1).padStart(6);
  process.stderr.write(`[bench ${s}s] ${line}\n`);
}

/** Runs `fn` once as a warm-up (rep 0), then `reps` times; logs each run with `describe`. */
export async function repeat<T>(
  label: string,
  reps: number,
  fn: (rep: number) => Promise<T>,
  describe: (result: T) => string,
  options: { warmup?: boolean } = {},
): Promise<T[]> {
  if (options.warmup ?? true) {
    progress(`${label}: warm-up`);
    const w = await fn(0);
    progress(`${label}: warm-up done (${describe(w)})`);
  }
  const results: T[] = [];
  for (let rep = 1; rep <= reps; rep++) {
    const r = await fn(rep);
    progress(`${label}: rep ${rep}/${reps}: ${describe(r)}`);
    results.push(r);
  }
  return results;
}

export const fmtInt = (n: number) => (Number.isFinite(n) ? Math.round(n).toLocaleString('en-US') : 'n/a');
export const fmt1 = (n: number) => (Number.isFinite(n) ? n.toFixed(1) : 'n/a');
export const fmt2 = (n: number) => (Number.isFinite(n) ? n.toFixed(2) : 'n/a');
