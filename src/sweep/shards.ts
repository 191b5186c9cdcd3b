// Queue shards (issue 13): QUEUE_SHARDS producer bindings, one consumer each.
// One Cloudflare Queue takes about 5,000 messages/s; with N shards the
// dispatchers spread their sends over N Queues. A task's messages always use
// one shard, chosen by a stable hash of its id, so its redeliveries and
// re-claims meet the same consumer's ordering and limits. Pump messages go
// round-robin over the shards, so pumps asked for at once land in different
// consumer invocations.
import { sendInBatches, settleSends, type PumpMessage, type PumpSender, type TaskMessage, type TaskSender } from '../queue/messages.ts';

/** FNV-1a (32 bits) of the id's decimal text, modulo the shard count: stable across isolates and deploys. */
export function shardOf(id: string, shards: number): number {
  if (shards <= 1) return 0;
  let h = 0x811c9dc5;
  for (let i = 0; i < id.length; i++) {
    h ^= id.charCodeAt(i);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h % shards;
}

type Sendable<T> = { body: T; delaySeconds?: number };

/** One TaskSender over several Queues: each message to its task's shard, in sendBatch calls of at most 100, all at once; it takes batches of any size. */
export function createShardedSender(shards: readonly TaskSender[]): TaskSender & PumpSender {
  if (shards.length === 0) throw new Error('at least one Queue shard is needed');
  let nextPump = 0;
  const sendGrouped = async <T>(groups: Sendable<T>[][]) => {
    await settleSends(groups.map((group, shard) => sendInBatches(shards[shard] as { sendBatch(m: Sendable<T>[]): Promise<unknown> }, group)));
  };
  return {
    maxBatch: Infinity,
    async sendBatch(messages: Iterable<Sendable<TaskMessage | PumpMessage>>) {
      const groups: Sendable<TaskMessage | PumpMessage>[][] = shards.map(() => []);
      for (const m of messages) {
        const shard = 'kind' in m.body ? nextPump++ % shards.length : shardOf(m.body.id, shards.length);
        groups[shard]!.push(m);
      }
      await sendGrouped(groups);
    },
  } as TaskSender & PumpSender;
}
