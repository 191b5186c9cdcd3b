// Idempotency keys: a waiting task is rescheduled, a spent key returns the
// existing task and is never resurrected — not even after retention deleted
// the row — and concurrent enqueues with one key create one task (S14).
import { beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { getTask } from '../../src/db/sql/tasks-read.ts';
import { reapExpiredLeases } from '../../src/db/sql/tasks-maintenance.ts';
import { defineTask } from '../../src/handlers/registry.ts';
import type { Db } from '../../src/db/seam.ts';
import { useTestDatabase, resetTables, T0, at } from '../helpers/db.ts';
import { createHarness, type Harness } from '../helpers/harness.ts';
import { createTestApi } from '../helpers/http.ts';

const t = useTestDatabase();
let h: Harness;
let pool: Db[] = [];

beforeAll(async () => {
  pool = await Promise.all(Array.from({ length: 4 }, () => t.open({ maxConnections: 5 })));
});
beforeEach(async () => {
  await resetTables(t.db);
  h = createHarness(t.db);
});

describe('a batch without keys (the plain insert, answers built from the input)', () => {
  it('answers with exactly what the database stored, in input order', async () => {
    const inputs = [
      { task: 'noop', payload: { a: [1, 'x', null], s: 'é\u{1F600}' } },
      { task: 'noop', queue: 'other', delay: 30, maxAttempts: 2, delivery: 'at_most_once' as const },
      { task: 'noop', runAt: at(7200), backoff: { base: 2, max: 60 }, timeout: 5 },
      { task: 'noop', payload: { nested: { deep: true } }, delay: 0.25 },
    ];
    const written = await h.enqueue(inputs, { now: T0 });
    expect(written.map((w) => w.outcome)).toEqual(['created', 'created', 'created', 'created']);
    expect(written.map((w) => w.task!.status)).toEqual(['queued', 'queued', 'scheduled', 'queued']);
    for (const w of written) expect(w.task).toEqual(await getTask(t.db, 'acme', w.task!.id));
  });
});

describe('idempotency keys', () => {
  it('while the task waits, the same key reschedules it with the new run time and payload', async () => {
    const [a] = await h.enqueue({ task: 'noop', idempotencyKey: 'k1', payload: { v: 1 }, delay: 3600 }, { now: T0 });
    expect(a!.outcome).toBe('created');
    const [b] = await h.enqueue({ task: 'noop', idempotencyKey: 'k1', payload: { v: 2 }, delay: 7200 }, { now: at(10) });
    expect(b!.outcome).toBe('rescheduled');
    expect(b!.task!.id).toBe(a!.task!.id);
    expect(b!.task!.payload).toEqual({ v: 2 });
    expect(b!.task!.runAt.toISOString()).toBe(at(7210).toISOString());
    expect(b!.task!.status).toBe('scheduled');

    // Rescheduled to now: it becomes runnable and gets a vtime.
    const [c] = await h.enqueue({ task: 'noop', idempotencyKey: 'k1', payload: { v: 3 } }, { now: at(20) });
    expect(c!.outcome).toBe('rescheduled');
    expect(c!.task!.status).toBe('queued');
    const count = await t.db.query<{ n: number }>('select count(*)::int as n from tasks');
    expect(count[0]!.n).toBe(1);
  });

  it('once the task has started, the key is spent: the existing task comes back, deduplicated', async () => {
    const [a] = await h.enqueue({ task: 'noop', idempotencyKey: 'k2', payload: { v: 1 } }, { now: T0 });
    await h.drain({ now: T0 });
    const [b] = await h.enqueue({ task: 'noop', idempotencyKey: 'k2', payload: { v: 2 } }, { now: at(5) });
    expect(b!.outcome).toBe('deduplicated');
    expect(b!.task!.id).toBe(a!.task!.id);
    expect(b!.task!.status).toBe('succeeded');
    expect(b!.task!.payload).toEqual({ v: 1 });
    // Running (started) counts as spent too.
    const [c] = await h.enqueue({ task: 'noop', idempotencyKey: 'k3' }, { now: T0 });
    await h.sweep({ now: T0 });
    await h.consume([h.outbox.take()[0]!.body], { now: T0, faults: async (point) => {
      if (point === 'consume.after_start') {
        const [d] = await h.enqueue({ task: 'noop', idempotencyKey: 'k3', delay: 60 }, { now: at(1) });
        expect(d!.outcome).toBe('deduplicated');
        expect(d!.task).toMatchObject({ id: c!.task!.id, status: 'running', payload: {} });
      }
    } });
    expect(await getTask(t.db, 'acme', c!.task!.id)).toMatchObject({ status: 'succeeded', runAt: T0 });
  });

  it('a task waiting for its retry has run: its key is spent; one whose dispatch was lost never ran: its key reschedules', async () => {
    const flaky = createHarness(t.db, {
      handlers: [
        defineTask('flaky', z.object({ v: z.number() }), async () => {
          throw new Error('boom');
        }),
      ],
    });
    const [a] = await flaky.enqueue(
      { task: 'flaky', payload: { v: 1 }, idempotencyKey: 'ran', queue: 'retrying', maxAttempts: 3, backoff: { base: 600, max: 600 } },
      { now: T0 },
    );
    await flaky.sweep({ now: T0 });
    await flaky.consume(flaky.outbox.take().map((m) => m.body), { now: T0 });
    // Its retry (full jitter: any time in the next 600 s) is left alone by the sweeps below.
    await t.db.query(`update queues set paused = true where name = 'retrying'`);
    const failed = (await getTask(t.db, 'acme', a!.task!.id))!;
    expect(failed).toMatchObject({ status: 'scheduled', attempts: 1 });
    const [again] = await flaky.enqueue({ task: 'flaky', payload: { v: 2 }, idempotencyKey: 'ran', queue: 'retrying', delay: 5000 }, { now: T0 });
    expect(again!.outcome).toBe('deduplicated');
    expect(again!.task).toEqual(failed);
    expect(await getTask(t.db, 'acme', a!.task!.id)).toEqual(failed);

    // Sent, never started, reaped: an attempt counted, no handler ran.
    const [lost] = await flaky.enqueue({ task: 'flaky', payload: { v: 1 }, idempotencyKey: 'lost', maxAttempts: 3 }, { now: T0 });
    await flaky.sweep({ now: T0 });
    flaky.outbox.take();
    expect(await reapExpiredLeases(t.db, { now: at(86_400), limit: 10, dispatchLeaseSeconds: 60 })).toEqual({ requeued: 0, retried: 1, dead: 0 });
    expect(await getTask(t.db, 'acme', lost!.task!.id)).toMatchObject({ status: 'scheduled', attempts: 1, startedAt: null });
    const [moved] = await flaky.enqueue({ task: 'flaky', payload: { v: 2 }, idempotencyKey: 'lost', delay: 3600 }, { now: at(86_401) });
    expect(moved!.outcome).toBe('rescheduled');
    expect(await getTask(t.db, 'acme', lost!.task!.id)).toMatchObject({ payload: { v: 2 }, runAt: at(86_401 + 3600) });
  });

  it('a spent key stays spent after retention deleted its task', async () => {
    const [a] = await h.enqueue({ task: 'noop', idempotencyKey: 'k4' }, { now: T0 });
    await h.drain({ now: T0 });
    const later = at(8 * 86_400);
    const swept = await h.sweep({ now: later });
    expect(swept.purged).toBe(1);
    expect(await getTask(t.db, 'acme', a!.task!.id)).toBeNull();

    const [b] = await h.enqueue({ task: 'noop', idempotencyKey: 'k4' }, { now: later });
    expect(b).toMatchObject({ outcome: 'deduplicated', task: null, spent: { taskId: a!.task!.id, status: 'succeeded' } });
    const count = await t.db.query<{ n: number }>('select count(*)::int as n from tasks');
    expect(count[0]!.n).toBe(0);
    // Another tenant's identical key is independent.
    const [c] = await h.enqueue({ task: 'noop', idempotencyKey: 'k4' }, { now: later, tenant: 'other' });
    expect(c!.outcome).toBe('created');
  });

  it('two tenants whose one key was spent and purged each get their own spent task back', async () => {
    const [a] = await h.enqueue({ task: 'noop', idempotencyKey: 'k6' }, { now: T0 });
    const [b] = await h.enqueue({ task: 'noop', idempotencyKey: 'k6' }, { now: T0, tenant: 'other' });
    await h.drain({ now: T0 });
    const later = at(8 * 86_400);
    expect((await h.sweep({ now: later })).purged).toBe(2);
    const [again] = await h.enqueue({ task: 'noop', idempotencyKey: 'k6' }, { now: later });
    const [againOther] = await h.enqueue({ task: 'noop', idempotencyKey: 'k6' }, { now: later, tenant: 'other' });
    expect(again).toMatchObject({ outcome: 'deduplicated', spent: { taskId: a!.task!.id } });
    expect(againOther).toMatchObject({ outcome: 'deduplicated', spent: { taskId: b!.task!.id } });
  });

  it('the database itself refuses a row that would resurrect a spent key (the purge race)', async () => {
    await t.db.query(
      `insert into spent_idempotency_keys (tenant, idempotency_key, task_id, status) values ('acme', 'k5', 1, 'succeeded')`,
    );
    await expect(
      t.db.query(
        `insert into tasks (tenant, task, status, run_at, idempotency_key) values ('acme', 'noop', 'scheduled', now(), 'k5')`,
      ),
    ).rejects.toMatchObject({ code: 'TQ001' });
  });

  it('20 concurrent enqueues with one key create one task', async () => {
    const results = await Promise.all(
      Array.from({ length: 20 }, (_, i) =>
        createHarness(pool[i % pool.length]!).enqueue({ task: 'noop', idempotencyKey: 'race', payload: { i }, delay: 60 }, { now: T0 }),
      ),
    );
    const ids = new Set(results.map(([r]) => r!.task!.id));
    expect(ids.size).toBe(1);
    expect(results.filter(([r]) => r!.outcome === 'created')).toHaveLength(1);
    expect(results.filter(([r]) => r!.outcome === 'rescheduled')).toHaveLength(19);
    const count = await t.db.query<{ n: number }>(`select count(*)::int as n from tasks where idempotency_key = 'race'`);
    expect(count[0]!.n).toBe(1);
  });

  it('a batch may not use one key twice', async () => {
    await expect(
      h.enqueue([
        { task: 'noop', idempotencyKey: 'dup' },
        { task: 'noop', idempotencyKey: 'dup' },
      ]),
    ).rejects.toMatchObject({ code: 'invalid_request', details: [{ path: 'tasks.1.idempotencyKey' }] });
  });
});

describe('a key reused with another task type or queue (issue 10, finding 7)', () => {
  const http = { task: 'http', payload: { url: 'https://example.com/hook' } };

  it('answers 409 conflict naming idempotencyKey, while waiting and once spent, and changes nothing', async () => {
    const [a] = await h.enqueue({ task: 'noop', idempotencyKey: 'k', payload: { v: 1 }, delay: 3600 }, { now: T0 });
    for (const input of [
      { ...http, idempotencyKey: 'k' },
      { task: 'noop', queue: 'other', idempotencyKey: 'k', payload: { v: 2 } },
    ]) {
      const refused = h.enqueue(input, { now: at(1) });
      await expect(refused).rejects.toMatchObject({ code: 'conflict', details: [{ path: 'idempotencyKey' }] });
    }
    expect(await getTask(t.db, 'acme', a!.task!.id)).toMatchObject({ task: 'noop', queue: 'default', payload: { v: 1 } });
    expect((await getTask(t.db, 'acme', a!.task!.id))!.runAt.toISOString()).toBe(at(3600).toISOString());

    await h.drain({ now: at(3600) });
    await expect(h.enqueue({ ...http, idempotencyKey: 'k' }, { now: at(3601) })).rejects.toMatchObject({ code: 'conflict' });
    // The same type and queue still deduplicate.
    const [again] = await h.enqueue({ task: 'noop', idempotencyKey: 'k' }, { now: at(3601) });
    expect(again!.outcome).toBe('deduplicated');
  });

  it('refuses a batch whole and names the item that reused the key', async () => {
    await h.enqueue({ task: 'noop', idempotencyKey: 'held', delay: 3600 }, { now: T0 });
    const refused = h.enqueue(
      [{ task: 'noop' }, { task: 'noop', idempotencyKey: 'fresh' }, { task: 'noop', queue: 'mail', idempotencyKey: 'held' }],
      { now: at(1) },
    );
    await expect(refused).rejects.toMatchObject({ code: 'conflict', details: [{ path: 'tasks.2.idempotencyKey' }] });
    const n = await t.db.query<{ n: number }>('select count(*)::int as n from tasks');
    expect(n[0]!.n).toBe(1);
  });

  it('concurrent enqueues of one key with two task types: one wins, the other is a conflict', async () => {
    const results = await Promise.allSettled(
      pool.map((db, i) =>
        createHarness(db).enqueue(i % 2 === 0 ? { task: 'noop', idempotencyKey: 'race' } : { ...http, idempotencyKey: 'race' }, { now: T0 }),
      ),
    );
    const rows = await t.db.query<{ task: string }>(`select task from tasks where idempotency_key = 'race'`);
    expect(rows).toHaveLength(1);
    for (const [i, r] of results.entries()) {
      const sameType = (i % 2 === 0 ? 'noop' : 'http') === rows[0]!.task;
      if (sameType) expect(r.status, String(i)).toBe('fulfilled');
      else expect(r.status === 'rejected' && (r.reason as { code?: string }).code, String(i)).toBe('conflict');
    }
  });
});

describe('over HTTP', () => {
  it('a key reused with another task type is a 409 conflict naming idempotencyKey', async () => {
    const api = createTestApi(t.db);
    api.setNow(T0);
    expect((await api.admin('POST', '/v1/tasks', { tenant: 'acme', body: { task: 'noop', idempotencyKey: 'h', delay: 60 } })).status).toBe(201);
    const r = await api.admin('POST', '/v1/tasks', {
      tenant: 'acme',
      body: { task: 'http', payload: { url: 'https://example.com/' }, idempotencyKey: 'h', delay: 60 },
    });
    expect(r.status).toBe(409);
    expect(r.body.error).toMatchObject({ code: 'conflict', details: [{ path: 'idempotencyKey' }] });
  });
});
