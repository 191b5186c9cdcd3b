// The Queue message format, shared by the producers (sweep/, the enqueue kick)
// and the consumer (consume/), so neither imports the other.
import type { LostFence } from '../db/sql/tasks-shared.ts';
import type { Logger } from '../log.ts';

/** What a Queue message carries: the task and the epoch it was claimed with. */
export interface TaskMessage {
  id: string;
  epoch: number;
  /** run_at in epoch milliseconds: the consumer waits out the sub-second rest. */
  runAt: number;
  /**
   * The task has a rate limit (sent only when true). A hint for the fenced
   * start's choice of statement: a message without it still starts a
   * rate-limited task on its key's line, one statement later.
   */
  rated?: boolean;
}

/** The part of a Cloudflare Queue producer binding the sweep uses. */
export interface TaskSender {
  sendBatch(messages: Iterable<{ body: TaskMessage; delaySeconds?: number }>): Promise<unknown>;
  /**
   * Most messages one sendBatch takes: a Queue binding QUEUE_SEND_LIMIT (the
   * default); the sharded sender any number, as it splits them per shard.
   */
  readonly maxBatch?: number;
}

/**
 * A message the dispatcher sends itself (issue 13): the consumer that
 * receives one becomes a dispatcher for a while (src/sweep/pump.ts).
 */
export interface PumpMessage {
  kind: 'pump';
}

/** Where pump messages go: the Queue binding the consumer reads. */
export interface PumpSender {
  sendBatch(messages: Iterable<{ body: PumpMessage }>): Promise<unknown>;
}

/** Cloudflare Queues take at most 100 messages per sendBatch. */
export const QUEUE_SEND_LIMIT = 100;

/**
 * Waits for every send of a batch, made all at once, then fails with the
 * first failure: none is still in flight when the caller gives claims back.
 */
export async function settleSends(sends: readonly Promise<unknown>[]): Promise<void> {
  const failed = (await Promise.allSettled(sends)).find((r) => r.status === 'rejected');
  if (failed) throw failed.reason;
}

/**
 * Sends messages in sendBatch calls of at most the sender's maxBatch, all at
 * once, settled as settleSends does. A claim of 500 costs one send's latency,
 * and through the sharded sender it goes whole, so each shard gets calls of
 * up to 100 rather than a share of every 100.
 */
export async function sendInBatches<T>(
  sender: { sendBatch(messages: T[]): Promise<unknown>; readonly maxBatch?: number },
  messages: readonly T[],
): Promise<void> {
  const size = sender.maxBatch ?? QUEUE_SEND_LIMIT;
  const sends: Promise<unknown>[] = [];
  for (let i = 0; i < messages.length; i += size) sends.push(sender.sendBatch(messages.slice(i, i + size)));
  await settleSends(sends);
}

export function isPumpMessage(body: unknown): body is PumpMessage {
  return typeof body === 'object' && body !== null && (body as { kind?: unknown }).kind === 'pump';
}

export function parseTaskMessage(body: unknown): TaskMessage | null {
  const b = body as Partial<TaskMessage> | null;
  if (!b || typeof b !== 'object') return null;
  if (typeof b.id !== 'string' || !/^\d{1,19}$/.test(b.id)) return null;
  if (typeof b.epoch !== 'number' || !Number.isSafeInteger(b.epoch) || b.epoch < 1) return null;
  return { id: b.id, epoch: b.epoch, runAt: typeof b.runAt === 'number' ? b.runAt : 0, ...(b.rated === true ? { rated: true } : {}) };
}

/** A fenced write that found the task under another epoch or status: reported, nothing applied (dispatch marks, finishes). */
export function reportLostFences(log: Logger, step: 'finishIfRunning' | 'markDispatched', lost: readonly LostFence[]): void {
  for (const l of lost) {
    log.warn('fenced write lost', {
      step,
      taskId: l.id,
      epoch: l.epoch,
      currentEpoch: l.currentEpoch,
      currentStatus: l.currentStatus,
    });
  }
}
