// `npm run bench:ab-statements -- <other tree>`: the claim of 500 and the
// fenced start of 100 from this tree and from another checkout (a
// `git worktree` of an earlier commit, with node_modules linked), run
// alternately on one connection over the same tasks, each in a transaction
// rolled back. Reports the backend's CPU per statement (parse, plan and run,
// from /proc/<pid>/schedstat: the time it ran, not the time it waited for a
// core), median and mean over AB_ROUNDS (default 30) rounds. On a shared
// machine whose speed drifts by tens of percent from minute to minute, the
// drains' rates cannot show a change of a few percent; two identical trees
// measured this way agree within 2 %. BENCH_FLOW (keyed, rated, rated1)
// gives the tasks the flow phase's flow control; a plain queue's claim and
// start run beside them for the difference. AB_PLANS=pooled runs each tree's
// statements as named ones (prepared once on the connection, generic plans
// from the sixth run, as the bench's pooled connections have them): the
// CPU of running them, without parsing and planning; by default each is
// parsed and planned afresh, as a Worker's are. Needs Linux and a local
// server (embedded unless DATABASE_URL names one). An analysis aid for
// BENCHMARKS.md.
import { resolve } from 'node:path';
import type { Queryable, Sql } from '../src/db/seam.ts';
import type { TaskMessage } from '../src/queue/messages.ts';
import { dispatchRunnable } from '../src/sweep/sweep.ts';
import { enqueueTasks, type TaskInput } from '../src/tasks/enqueue.ts';
import { processRunNs } from './cpu.ts';
import { backendPidOf, BENCH_TENANT, benchConfig, benchLogger, benchRegistry, migrateProject, openProjectDb } from './core.ts';
import { flowOf, type DrainFlow } from './project.ts';
import { startProxyProcess, startServer, withClient } from './server.ts';

type Fence = typeof import('../src/db/sql/tasks-fence.ts');
type Dispatch = typeof import('../src/db/sql/tasks-dispatch.ts');

const other = process.argv[2];
if (!other) throw new Error('usage: npm run bench:ab-statements -- <path of the other checkout>');
const trees = {
  this: { fence: (await import('../src/db/sql/tasks-fence.ts')) as Fence, dispatch: (await import('../src/db/sql/tasks-dispatch.ts')) as Dispatch },
  other: {
    fence: (await import(resolve(other, 'src/db/sql/tasks-fence.ts'))) as Fence,
    dispatch: (await import(resolve(other, 'src/db/sql/tasks-dispatch.ts'))) as Dispatch,
  },
};
const flow = (process.env.BENCH_FLOW ?? 'plain') as DrainFlow;
const rounds = Number(process.env.AB_ROUNDS ?? 30);
const pooled = process.env.AB_PLANS === 'pooled';

class Rollback extends Error {}

const server = await startServer(process.env.DATABASE_URL || undefined);
const proxy = await startProxyProcess();
try {
  const url = await server.freshDatabase('bench_ab_statements');
  await migrateProject(url, proxy.address);
  const db = await openProjectDb(url, proxy.address);
  const registry = benchRegistry(benchConfig);
  const enqueue = (inputs: TaskInput[]) => enqueueTasks({ db, config: benchConfig, registry }, BENCH_TENANT, inputs);
  for (let i = 0; i < 10; i++) {
    await enqueue(Array.from({ length: 1000 }, (_, j) => ({ task: 'noop', payload: { n: j }, ...flowOf(flow, j) })));
    await enqueue(Array.from({ length: 1000 }, (_, j) => ({ task: 'noop', payload: { n: j }, queue: 'plain' })));
  }
  await withClient(url, (c) => c.query('vacuum analyze tasks'));
  // One claim of each queue for real, left running: the batches the starts take.
  let ticks = 0;
  const batchOf = async (queue: string) => {
    const sent: TaskMessage[] = [];
    await dispatchRunnable(
      {
        db,
        config: benchConfig,
        sender: { sendBatch: async (ms) => void sent.push(...[...ms].map((m) => m.body)) },
        log: benchLogger('ab').log,
        workerId: 'ab',
        elapsed: () => ticks++,
      },
      { queues: [queue], deadline: 1 },
    );
    return sent.slice(0, 100).map((m) => ({ id: m.id, epoch: m.epoch, rated: m.rated }));
  };
  const [batch, plainBatch] = [await batchOf('default'), await batchOf('plain')];

  const pid = await backendPidOf(db);
  const cpuNs = () => processRunNs(pid);
  /** The backend's CPU (ms) for the one statement `run` sends, rolled back. */
  const measure = async (tree: string, run: (q: Queryable) => Promise<unknown>): Promise<number> => {
    let ms = NaN;
    try {
      await db.transaction(async (tx) => {
        const q = {
          query: async (s: Sql | string, values?: readonly unknown[]) => {
            const c0 = cpuNs();
            const text = typeof s === 'string' ? s : s.text;
            await tx.query(pooled && typeof s !== 'string' ? { name: `${s.name}_${tree}`, text } : text, values);
            ms = (cpuNs() - c0) / 1e6;
            throw new Rollback();
          },
        } as unknown as Queryable;
        await run(q);
      });
    } catch (error) {
      if (!(error instanceof Rollback)) throw error;
    }
    return ms;
  };
  const now = new Date(Date.now() + 120_000);
  // A flow-controlled queue's claim is the whole statement (the sweep's hint
  // sends it there at once); measured from the plain one, only that one's
  // hand-over would be.
  const claim = (d: Dispatch, queue: string) => (q: Queryable) =>
    d.claimTasks(q, { now: new Date(), queue, limit: 500, claimedBy: 'ab', leaseSeconds: 60, flow: queue === 'default' && flow !== 'plain' });
  const variants: [string, (q: Queryable) => Promise<unknown>][] = [
    ['start of 100, this tree', (q) => trees.this.fence.startIfClaimed(q, { now, tasks: batch, leaseGraceSeconds: 30 })],
    ['start of 100, the other', (q) => trees.other.fence.startIfClaimed(q, { now, tasks: batch, leaseGraceSeconds: 30 })],
    ['claim of 500, this tree', claim(trees.this.dispatch, 'default')],
    ['claim of 500, the other', claim(trees.other.dispatch, 'default')],
    ['claim of 500 plain, this tree', claim(trees.this.dispatch, 'plain')],
    ['start of 100 plain, this tree', (q) => trees.this.fence.startIfClaimed(q, { now, tasks: plainBatch, leaseGraceSeconds: 30 })],
  ];
  const out = new Map<string, number[]>();
  // Every other round in reverse, so no variant always runs first.
  for (let r = 0; r < rounds; r++) {
    for (const [name, run] of r % 2 ? variants : [...variants].reverse()) {
      out.set(name, [...(out.get(name) ?? []), await measure(name.endsWith('the other') ? 'other' : 'this', run)]);
    }
  }
  console.log(`# ${flow} tasks; backend CPU per statement (ms), ${rounds} rounds, ${pooled ? 'named (generic plans)' : 'each planned afresh'}`);
  for (const [name, xs] of out) {
    const sorted = [...xs].sort((a, b) => a - b);
    const mean = xs.reduce((a, b) => a + b, 0) / xs.length;
    console.log(`${name}: median ${sorted[Math.floor(xs.length / 2)]!.toFixed(2)}, mean ${mean.toFixed(2)}`);
  }
  await db.close();
} finally {
  await proxy.stop();
  await server.stop();
}
