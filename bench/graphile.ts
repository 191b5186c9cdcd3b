// graphile-worker 0.18 with the settings of its performance page
// (https://worker.graphile.org/docs/performance): concurrentJobs 24,
// maxPoolSize 25, localQueue of 500, completion and failure batching with no
// delay; addJobs in batches of 1,000. It deletes a job when it completes, so
// "finished rows" never pile up in its table.
import { Logger, makeWorkerUtils, run, type Runner, type WorkerUtils } from 'graphile-worker';
import pg from 'pg';
import type { PeerDrainResult, PeerRate } from './peers.ts';
import { delta, sampleWaits, snapshot } from './pgstats.ts';
import type { Ctx } from './context.ts';
import { databaseOf } from './server.ts';
import { cpuBetween } from './cpu.ts';
import { benchPayload, type Settings } from './settings.ts';
import { sleep } from './stats.ts';

const quiet = new Logger(() => (level, message) => {
  if (level === 'error') process.stderr.write(`[graphile-worker] ${message}\n`);
});

/** The worker options every graphile-worker run uses, and the settings print shows. */
function workerOptions(s: Settings) {
  return {
    concurrentJobs: s.graphile.concurrentJobs,
    maxPoolSize: s.graphile.maxPoolSize,
    localQueue: { size: s.graphile.localQueueSize },
    completeJobBatchDelay: s.graphile.completeJobBatchDelay,
    failJobBatchDelay: s.graphile.failJobBatchDelay,
    pollInterval: s.graphile.pollInterval,
  };
}

export function graphileSettings(s: Settings): Record<string, unknown> {
  return {
    version: '0.18.0',
    worker: workerOptions(s),
    addJobsBatch: s.batchSize,
  };
}

async function utils(url: string): Promise<WorkerUtils> {
  const u = await makeWorkerUtils({ connectionString: url, logger: quiet });
  await u.migrate();
  return u;
}

async function jobsLeft(client: pg.Client): Promise<number> {
  return Number((await client.query<{ n: string }>('select count(*) as n from graphile_worker._private_jobs')).rows[0]!.n);
}

async function startRunner(url: string, s: Settings, taskList: Record<string, (payload: unknown) => Promise<void>>): Promise<Runner> {
  return run({
    logger: quiet,
    noHandleSignals: true,
    taskList,
    preset: {
      worker: {
        connectionString: url,
        ...workerOptions(s),
        crontabFile: '/nonexistent/crontab',
      },
    },
  });
}

export async function graphileEnqueue(ctx: Ctx, mode: 'single' | 'batch', count?: number): Promise<PeerRate> {
  const { server, settings: s } = ctx;
  const url = await server.freshDatabase(`bench_graphile_enqueue_${mode}`);
  const u = await utils(url);
  try {
    const n = count ?? (mode === 'single' ? s.singleTasks : s.tasks);
    const t0 = performance.now();
    if (mode === 'batch') {
      for (let i = 0; i < n; i += s.batchSize) {
        await u.addJobs(Array.from({ length: Math.min(s.batchSize, n - i) }, (_, k) => ({ identifier: 'noop', payload: benchPayload(i + k) })));
      }
    } else {
      let next = 0;
      await Promise.all(
        Array.from({ length: s.singleConcurrency }, async () => {
          while (next < n) {
            const i = next++;
            await u.addJob('noop', { n: i });
          }
        }),
      );
    }
    const seconds = (performance.now() - t0) / 1000;
    const stored = await u.withPgClient((c) => jobsLeft(c as unknown as pg.Client));
    if (stored !== n) throw new Error(`graphile-worker ${mode} enqueue: ${stored} of ${n} stored`);
    return { tasks: n, seconds, rate: n / seconds };
  } finally {
    await u.release();
  }
}

export async function graphileDrain(ctx: Ctx): Promise<PeerDrainResult> {
  const { server, settings: s } = ctx;
  const name = 'bench_graphile_drain';
  const url = await server.freshDatabase(name);
  const u = await utils(url);
  try {
    for (let i = 0; i < s.tasks; i += s.batchSize) {
      await u.addJobs(Array.from({ length: Math.min(s.batchSize, s.tasks - i) }, (_, k) => ({ identifier: 'noop', payload: benchPayload(i + k) })));
    }
  } finally {
    await u.release();
  }
  const poll = new pg.Client({ connectionString: url });
  await poll.connect();
  if ((await jobsLeft(poll)) !== s.tasks) throw new Error('graphile-worker drain set-up: jobs missing');
  const tables = ['graphile_worker._private_jobs'];
  const before = await snapshot(url, tables);
  const sampler = await sampleWaits(server.url, databaseOf(url));
  let handled = 0;
  const cpu0 = ctx.cpu();
  const t0 = performance.now();
  const runner = await startRunner(url, s, {
    noop: async () => {
      handled += 1;
    },
  });
  try {
    for (;;) {
      if ((await jobsLeft(poll)) === 0) break;
      if (performance.now() - t0 > 300_000) throw new Error('graphile-worker drain: jobs left after 300 s');
      await sleep(10);
    }
  } finally {
    await runner.stop();
  }
  const seconds = (performance.now() - t0) / 1000;
  const cpu = cpuBetween(cpu0, ctx.cpu());
  const waits = await sampler.stop();
  await poll.end();
  await sleep(200);
  const after = await snapshot(url, tables);
  // Completed jobs are deleted; failed ones stay with last_error set, so an empty table and a handler count prove it.
  if (handled !== s.tasks) throw new Error(`graphile-worker drain: handler ran ${handled} times for ${s.tasks} jobs`);
  return { tasks: s.tasks, seconds, rate: s.tasks / seconds, finishedRows: 0, pg: await delta(url, before, after), waits, cpu, note: 'completed jobs are deleted' };
}

export async function graphileLatency(ctx: Ctx, due: () => number[]): Promise<number[]> {
  const { server, settings: s } = ctx;
  const url = await server.freshDatabase('bench_graphile_latency');
  const u = await utils(url);
  const lateness: number[] = [];
  const runner = await startRunner(url, s, {
    probe: async (payload) => {
      lateness.push(Date.now() - (payload as { runAt: number }).runAt);
    },
  });
  try {
    const instants = due();
    await u.addJobs(instants.map((runAt) => ({ identifier: 'probe', payload: { runAt }, runAt: new Date(runAt) })));
    const deadline = instants.at(-1)! + 60_000;
    while (lateness.length < instants.length) {
      if (Date.now() > deadline) throw new Error(`graphile-worker latency: ${lateness.length} of ${instants.length} started`);
      await sleep(50);
    }
    for (let i = 0; i < 100; i++) {
      if ((await u.withPgClient((c) => jobsLeft(c as unknown as pg.Client))) === 0) break;
      await sleep(50);
    }
    const left = await u.withPgClient((c) => jobsLeft(c as unknown as pg.Client));
    if (left !== 0) throw new Error(`graphile-worker latency: ${left} jobs not completed`);
    return lateness;
  } finally {
    await runner.stop();
    await u.release();
  }
}
