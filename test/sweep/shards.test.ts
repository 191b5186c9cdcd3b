// Queue shards (issue 13): a stable hash of the task id picks one shard for
// all of a task's messages; the sharded sender keeps the 100-message limit
// per sendBatch and spreads pump messages round-robin.
import { describe, expect, it } from 'vitest';
import { createShardedSender, shardOf } from '../../src/sweep/shards.ts';
import { sendInBatches, type PumpMessage, type TaskMessage, type TaskSender } from '../../src/queue/messages.ts';

type Body = TaskMessage | PumpMessage;

function recorders(n: number) {
  const calls: Body[][][] = Array.from({ length: n }, () => []);
  const senders: TaskSender[] = calls.map((c) => ({
    sendBatch: async (b: Iterable<{ body: Body }>) => void c.push([...b].map((m) => m.body)),
  })) as TaskSender[];
  return { calls, senders };
}

describe('queue shards', () => {
  it('a task id always maps to one shard, and 10,000 ids spread within 5 % of even over 4 shards', () => {
    const counts = [0, 0, 0, 0];
    for (let id = 1; id <= 10_000; id++) {
      const s = shardOf(String(id), 4);
      expect(shardOf(String(id), 4)).toBe(s);
      counts[s]! += 1;
    }
    for (const c of counts) expect(Math.abs(c - 2500)).toBeLessThanOrEqual(125);
    expect(shardOf('12345', 1)).toBe(0);
    // Not the id modulo the count: a tenant's ids in steps of 4 still spread.
    expect(new Set(Array.from({ length: 100 }, (_, i) => shardOf(String(4 * i), 4))).size).toBe(4);
  });

  it('sends each message to its task shard, at most 100 per sendBatch; pumps go round-robin', async () => {
    const { calls, senders } = recorders(3);
    const sender = createShardedSender(senders);
    await sender.sendBatch(Array.from({ length: 500 }, (_, i) => ({ body: { id: String(1000 + i), epoch: 1, runAt: 0 } })));
    await sender.sendBatch(Array.from({ length: 6 }, () => ({ body: { kind: 'pump' as const } })));
    const tasks = calls.map((shard) => shard.flat().filter((b): b is TaskMessage => !('kind' in b)));
    expect(tasks.flat()).toHaveLength(500);
    tasks.forEach((shard, i) => shard.forEach((m) => expect(shardOf(m.id, 3)).toBe(i)));
    for (const shard of calls) for (const batch of shard) expect(batch.length).toBeLessThanOrEqual(100);
    expect(calls.map((shard) => shard.flat().filter((b) => 'kind' in b).length)).toEqual([2, 2, 2]);
  });

  it('a claim of 500 goes to the sharded sender whole: each shard gets full calls, not a share of every 100', async () => {
    const { calls, senders } = recorders(3);
    const messages = Array.from({ length: 500 }, (_, i) => ({ body: { id: String(1000 + i), epoch: 1, runAt: 0 } }));
    await sendInBatches<{ body: TaskMessage }>(createShardedSender(senders), messages);
    const perShard = calls.map((shard) => shard.flat().length);
    expect(perShard.reduce((a, b) => a + b, 0)).toBe(500);
    // ceil(n / 100) calls per shard (6 here), where chunking by 100 first would make 15.
    calls.forEach((shard, i) => expect(shard).toHaveLength(Math.ceil(perShard[i]! / 100)));
    // A Queue binding itself still gets calls of at most 100.
    const single = recorders(1);
    await sendInBatches(single.senders[0]!, messages);
    expect(single.calls[0]!.map((b) => b.length)).toEqual([100, 100, 100, 100, 100]);
  });
});
