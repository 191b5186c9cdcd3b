// Memory per batch, run by run.ts as a child process:
//   node --expose-gc --max-semi-space-size=64 bench/memory.ts <database url> <ws proxy>
// For one sweep that dispatches 100 tasks and one consumeBatch of 100, it
// reads V8's heapUsed after a full GC (before), right after the step with no
// GC in between (the young generation is made large enough that none runs:
// this is what the step allocated, an upper bound of its peak), and after a
// full GC again (what it retained). A step during which V8 collected anyway
// is repeated. Prints one JSON line.
import { PerformanceObserver } from 'node:perf_hooks';
import { consumeBatch } from '../src/consume/consume.ts';
import type { TaskMessage } from '../src/queue/messages.ts';
import { sweepOnce } from '../src/sweep/sweep.ts';
import { enqueueTasks } from '../src/tasks/enqueue.ts';
import { BENCH_TENANT, benchConfig, benchLogger, benchRegistry, openProjectDb } from './core.ts';
import { summarize, type Summary } from './stats.ts';

const gc = (globalThis as { gc?: () => void }).gc;
if (!gc) throw new Error('run with --expose-gc');
const [url, proxy] = process.argv.slice(2);
if (!url || !proxy) throw new Error('usage: memory.ts <database url> <ws proxy>');

// GC entries arrive asynchronously: keep their start times and check the window afterwards.
const collections: number[] = [];
new PerformanceObserver((list) => {
  for (const e of list.getEntries()) collections.push(e.startTime);
}).observe({ entryTypes: ['gc'] });

export interface StepMemory {
  allocatedBytes: Summary;
  retainedBytes: Summary;
  heapUsedAfterBytes: Summary;
  rssBytes: number;
}

async function measure(step: () => Promise<void>): Promise<{ allocated: number; retained: number; after: number } | null> {
  gc!();
  await new Promise((r) => setImmediate(r));
  gc!();
  const before = process.memoryUsage().heapUsed;
  const t0 = performance.now();
  await step();
  const peak = process.memoryUsage().heapUsed;
  const t1 = performance.now();
  await new Promise((r) => setTimeout(r, 20));
  const clean = !collections.some((t) => t >= t0 && t <= t1);
  gc!();
  await new Promise((r) => setImmediate(r));
  gc!();
  const after = process.memoryUsage().heapUsed;
  return clean ? { allocated: peak - before, retained: after - before, after } : null;
}

const db = await openProjectDb(url, proxy);
const registry = benchRegistry(benchConfig);
const { log } = benchLogger('memory');
const runs = { sweep: [] as { allocated: number; retained: number; after: number }[], consume: [] as { allocated: number; retained: number; after: number }[] };
try {
  for (let i = 0; runs.consume.length < 7 && i < 30; i++) {
    await enqueueTasks({ db, config: benchConfig, registry }, BENCH_TENANT, Array.from({ length: 100 }, (_, k) => ({ task: 'noop', payload: { n: k } })));
    const sent: TaskMessage[] = [];
    const sender = { sendBatch: async (ms: Iterable<{ body: TaskMessage }>) => void sent.push(...[...ms].map((m) => m.body)) };
    const s = await measure(async () => {
      await sweepOnce({ db, config: benchConfig, sender, log, workerId: 'bench-memory' });
    });
    if (sent.length !== 100) throw new Error(`memory: the sweep sent ${sent.length} of 100`);
    const c = await measure(async () => {
      const out = await consumeBatch({ db, config: benchConfig, registry, log }, sent);
      if (out.results.length !== 100) throw new Error('memory: consumeBatch did not finish 100');
    });
    // The first round warms up (prepared statements, lazy modules); keep clean later rounds.
    if (i === 0) continue;
    if (s) runs.sweep.push(s);
    if (c) runs.consume.push(c);
  }
} finally {
  await db.close();
}
const summary = (xs: { allocated: number; retained: number; after: number }[]): StepMemory => ({
  allocatedBytes: summarize(xs.map((x) => x.allocated)),
  retainedBytes: summarize(xs.map((x) => x.retained)),
  heapUsedAfterBytes: summarize(xs.map((x) => x.after)),
  rssBytes: process.memoryUsage().rss,
});
console.log(JSON.stringify({ sweep: summary(runs.sweep), consume: summary(runs.consume) }));
