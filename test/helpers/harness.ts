// Wires the core the way the Worker does, over a real database, with the
// Cloudflare Queue replaced by an in-process list of sent messages (the
// workerd tests use the real local Queue). Time is passed explicitly.
import { defaultConfig, type Config } from '../../src/config.ts';
import { consumeBatch, type ConsumeOutcome, type OnSettled } from '../../src/consume/consume.ts';
import type { Db } from '../../src/db/seam.ts';
import type { Faults } from '../../src/faults.ts';
import { taskTypes } from '../../functions/tasks.ts';
import { z } from 'zod';
import { createRegistry, defineTask, type TaskHandler } from '../../src/handlers/registry.ts';
import { createLogger, type Logger, type LogLevel } from '../../src/log.ts';
import { createSigningSecretStore } from '../../src/tenants/signing-secrets.ts';
import { runPump } from '../../src/sweep/pump.ts';
import type { PumpMessage, PumpSender, TaskMessage, TaskSender } from '../../src/queue/messages.ts';
import { sweepOnce, type DispatcherCounts, type SweepCounts } from '../../src/sweep/sweep.ts';
import { enqueueTasks, type EnqueueResult, type TaskInput } from '../../src/tasks/enqueue.ts';
import { TEST_SIGNING_SECRET } from './secrets.ts';

export interface SentMessage {
  body: TaskMessage;
  delaySeconds?: number;
}

/** An in-process stand-in for the Queue producer: records what was sent. */
export function createOutbox(): TaskSender & { messages: SentMessage[]; take(): SentMessage[] } {
  const messages: SentMessage[] = [];
  return {
    messages,
    async sendBatch(batch) {
      for (const m of batch) messages.push({ body: structuredClone(m.body), delaySeconds: m.delaySeconds });
    },
    take() {
      return messages.splice(0, messages.length);
    },
  };
}

/** An in-process stand-in for the Queue's pump messages: counts what was sent. */
export function createPumpbox(): PumpSender & { messages: PumpMessage[]; take(): PumpMessage[] } {
  const messages: PumpMessage[] = [];
  return {
    messages,
    async sendBatch(batch) {
      for (const m of batch) messages.push(structuredClone(m.body));
    },
    take() {
      return messages.splice(0, messages.length);
    },
  };
}

export interface LogLine {
  level: string;
  msg: string;
  [k: string]: unknown;
}

export function captureLogs(level: LogLevel = 'debug'): { log: Logger; lines: LogLine[] } {
  const lines: LogLine[] = [];
  return { lines, log: createLogger({ level, sink: (_l, line) => lines.push(JSON.parse(line) as LogLine) }) };
}

export interface Harness {
  db: Db;
  config: Config;
  outbox: ReturnType<typeof createOutbox>;
  /** Pump messages the sweep and the pumps sent (issue 13). */
  pumpbox: ReturnType<typeof createPumpbox>;
  logs: LogLine[];
  enqueue(inputs: TaskInput | TaskInput[], options?: { now?: Date; tenant?: string }): Promise<EnqueueResult[]>;
  sweep(options?: {
    now?: Date;
    faults?: Faults;
    workerId?: string;
    sender?: TaskSender;
    /** The budget's clock (milliseconds); tests pass a counter to bound a sweep deterministically. */
    elapsed?: () => number;
    random?: () => number;
    /** Parallel dispatch: the sweep holds a dispatcher slot and fans out to pumps (true: to pumpbox). */
    pumps?: PumpSender | true;
  }): Promise<SweepCounts>;
  /** One pump invocation (src/sweep/pump.ts); it re-arms to pumpbox. */
  pump(options?: { now?: Date; faults?: Faults; workerId?: string; sender?: TaskSender; elapsed?: () => number }): Promise<DispatcherCounts>;
  consume(
    bodies: unknown[],
    options?: {
      now?: Date;
      faults?: Faults;
      onSettled?: OnSettled;
      /**
       * The consumer's wait for early tasks. Default: with `now`, a tenth of it
       * in real time (the start after it runs at now + the wait); on the
       * database clock, a real sleep.
       */
      sleep?: (ms: number) => Promise<void>;
    },
  ): Promise<ConsumeOutcome>;
  /**
   * Messages a consume retried with a delay (delivered too early), as the
   * Queue keeps them: `drain` delivers each once its time has come.
   */
  redeliveries: { body: unknown; notBefore: number }[];
  /** Sweeps, then consumes everything sent (and redeliveries now due), until nothing is left to send. */
  drain(options?: { now?: Date; rounds?: number }): Promise<void>;
  /**
   * Delivers messages sent at `now` as the Queue does: each at now + its
   * delay (one the consumer retried with a delay, at its time), in time
   * order, those due at one instant in one batch, until none is left. A
   * message still arrives before its run_at (the delay is rounded down, less
   * the batch timeout) and the consumer waits out the rest on the override
   * (no real sleep: it starts its early groups in order).
   */
  deliver(sent: readonly SentMessage[], options: { now: Date }): Promise<void>;
}

/**
 * The consumer's wait under a \`now\` override: a real sleep of a tenth of it,
 * so the starts after waits of different lengths still run in the order of
 * their times across batches consumed side by side (a rate-limited key's
 * start line depends on it; within a batch the consumer keeps that order).
 */
const virtualSleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms / 10));

export function createHarness(
  db: Db,
  options: { config?: Partial<Config>; handlers?: TaskHandler<never>[] } = {},
): Harness {
  // Tests log at warn, as the workerd tests' LOG_LEVEL binding says.
  const config: Config = { ...defaultConfig, logLevel: 'warn', ...options.config };
  const registry = createRegistry([...taskTypes({ config }), ...(options.handlers ?? [])]);
  const outbox = createOutbox();
  const pumpbox = createPumpbox();
  const signingSecrets = createSigningSecretStore(TEST_SIGNING_SECRET);
  const { log, lines } = captureLogs(config.logLevel);
  let sweeps = 0;
  let pumps = 0;
  const h: Harness = {
    db,
    config,
    outbox,
    pumpbox,
    logs: lines,
    enqueue: (inputs, o = {}) =>
      enqueueTasks({ db, config, registry }, o.tenant ?? 'acme', Array.isArray(inputs) ? inputs : [inputs], { now: o.now }),
    sweep: (o = {}) =>
      sweepOnce(
        {
          db,
          config,
          sender: o.sender ?? outbox,
          log,
          workerId: o.workerId ?? `test-sweep-${++sweeps}`,
          faults: o.faults,
          elapsed: o.elapsed,
          random: o.random,
          pumps: o.pumps === true ? pumpbox : o.pumps,
        },
        { now: o.now },
      ),
    pump: (o = {}) =>
      runPump(
        {
          db,
          config,
          sender: o.sender ?? outbox,
          pumps: pumpbox,
          log,
          workerId: o.workerId ?? `test-pump-${++pumps}`,
          faults: o.faults,
          elapsed: o.elapsed,
        },
        { now: o.now },
      ),
    redeliveries: [],
    consume: (bodies, o = {}) =>
      consumeBatch(
        { db, config, registry, log, signingSecrets, faults: o.faults, sleep: o.sleep ?? (o.now ? virtualSleep : undefined) },
        bodies,
        {
          now: o.now,
          onSettled: (i, verdict, retryDelaySeconds) => {
            if (verdict === 'retry' && retryDelaySeconds !== undefined) {
              h.redeliveries.push({ body: bodies[i], notBefore: (o.now?.getTime() ?? Date.now()) + retryDelaySeconds * 1000 });
            }
            o.onSettled?.(i, verdict, retryDelaySeconds);
          },
        },
      ),
    async drain(o = {}) {
      for (let i = 0; i < (o.rounds ?? 20); i++) {
        await h.sweep({ now: o.now });
        const nowMs = o.now?.getTime() ?? Date.now();
        const due = h.redeliveries.filter((r) => r.notBefore <= nowMs);
        h.redeliveries = h.redeliveries.filter((r) => r.notBefore > nowMs);
        const bodies = [...outbox.take().map((m) => m.body), ...due.map((r) => r.body)];
        if (bodies.length === 0) return;
        await h.consume(bodies, { now: o.now });
      }
    },
    async deliver(sent, o) {
      let pending = sent.map((m) => ({ body: m.body as unknown, at: o.now.getTime() + (m.delaySeconds ?? 0) * 1000 }));
      for (;;) {
        pending.push(...h.redeliveries.splice(0).map((r) => ({ body: r.body, at: r.notBefore })));
        if (pending.length === 0) return;
        const when = Math.min(...pending.map((p) => p.at));
        const bodies = pending.filter((p) => p.at === when).map((p) => p.body);
        pending = pending.filter((p) => p.at !== when);
        await h.consume(bodies, { now: new Date(when), sleep: async () => {} });
      }
    },
  };
  return h;
}

/**
 * Claim statements counted by name, whichever of the two ran: the plain one,
 * or the whole one where the batch held flow control or this isolate's hint
 * (claimBatch) says the queue's last claim met it.
 */
export const claimsCounted = (byName: Record<string, number>): number =>
  (byName.tasks_claim_runnable_plain ?? 0) + (byName.tasks_claim_runnable ?? 0);

/** A `count` task type that records how many times each task's handler ran. */
export function countingTask(): { task: TaskHandler<never>; runs: Map<string, number> } {
  const runs = new Map<string, number>();
  const task = defineTask('count', z.object({}).default({}), async (_p, ctx) => {
    runs.set(ctx.taskId, (runs.get(ctx.taskId) ?? 0) + 1);
  });
  return { task, runs };
}
