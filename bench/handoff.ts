// The one piece of the deployment the bench replaces: the Cloudflare Queue.
// The sweep's `sendBatch` hands the same messages to an in-process queue that
// honours `delaySeconds`, and consumer loops receive batches of up to 100
// (as Queues deliver) and pass the bodies to the real `consumeBatch`.
//
// Unlike a real Queue there is no network hop and no `max_batch_timeout`
// wait: a consumer takes whatever is visible at once. That flatters nothing
// in the drain (batches are always full) but does leave out up to 1 s of
// batching delay a deployed consumer may add to pickup latency; BENCHMARKS.md
// says so beside the latency figure.
import type { TaskMessage, TaskSender } from '../src/queue/messages.ts';

export interface Handoff extends TaskSender {
  /** Resolves with 1..max visible messages, or [] once closed. */
  receive(max: number): Promise<TaskMessage[]>;
  /** Puts messages back (a consumer's `retry` verdict), visible after `delayMs`. */
  redeliver(bodies: readonly TaskMessage[], delayMs: number): void;
  sent(): number;
  close(): void;
}

export function createHandoff(): Handoff {
  const ready: TaskMessage[] = [];
  let head = 0;
  const waiters: (() => void)[] = [];
  const timers = new Set<ReturnType<typeof setTimeout>>();
  let closed = false;
  let sentCount = 0;

  const wake = () => {
    while (waiters.length > 0) waiters.shift()!();
  };
  const makeVisible = (body: TaskMessage, delayMs: number) => {
    if (delayMs <= 0) {
      ready.push(body);
      return;
    }
    const t = setTimeout(() => {
      timers.delete(t);
      ready.push(body);
      wake();
    }, delayMs);
    timers.add(t);
  };

  return {
    async sendBatch(messages) {
      for (const m of messages) {
        sentCount += 1;
        // A copy of the whole body, as a Queue would serialise it.
        makeVisible({ ...m.body }, (m.delaySeconds ?? 0) * 1000);
      }
      wake();
    },
    async receive(max) {
      for (;;) {
        if (head < ready.length) {
          const batch = ready.slice(head, head + max);
          head += batch.length;
          if (head > 10_000 && head * 2 > ready.length) {
            ready.splice(0, head);
            head = 0;
          }
          return batch;
        }
        if (closed) return [];
        await new Promise<void>((resolve) => waiters.push(resolve));
      }
    },
    redeliver(bodies, delayMs) {
      for (const b of bodies) makeVisible(b, delayMs);
      wake();
    },
    sent: () => sentCount,
    close() {
      closed = true;
      for (const t of timers) clearTimeout(t);
      timers.clear();
      wake();
    },
  };
}
