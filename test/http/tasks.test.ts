// /v1/tasks over the real app and database: single and batch enqueue,
// all-or-nothing validation naming index and field, limits, listing.
import { beforeEach, describe, expect, it } from 'vitest';
import { countStatements } from '../../src/db/seam.ts';
import { utf8Length } from '../../src/tasks/attempts.ts';
import { useTestDatabase, resetTables } from '../helpers/db.ts';
import { createTestApi } from '../helpers/http.ts';

const t = useTestDatabase();
let api: ReturnType<typeof createTestApi>;
const count = async () => (await t.db.query<{ n: number }>('select count(*)::int as n from tasks'))[0]!.n;

beforeEach(async () => {
  await resetTables(t.db);
  api = createTestApi(t.db);
});

describe('POST /v1/tasks/batch', () => {
  it('writes 1,000 tasks in one statement, answering in input order', async () => {
    const counted = countStatements(t.db);
    api = createTestApi(counted.db);
    const tasks = Array.from({ length: 1000 }, (_, i) => ({ task: 'noop', payload: { i }, delay: 3600 }));
    const r = await api.admin('POST', '/v1/tasks/batch', { body: { tasks } });
    expect(r.status).toBe(201);
    expect(r.body.tasks).toHaveLength(1000);
    expect(r.body.tasks.map((x: { payload: { i: number } }) => x.payload.i)).toEqual(tasks.map((_, i) => i));
    expect(counted.counts.byName).toEqual({ tasks_insert_batch_plain: 1 });
    expect(await count()).toBe(1000);
  });

  it('refuses the whole batch when one item is bad, naming its index and field', async () => {
    const tasks: unknown[] = Array.from({ length: 10 }, () => ({ task: 'noop' }));
    tasks[3] = { task: 'noop', runAt: 'next tuesday' };
    tasks[7] = { task: 'noop', delay: -1 };
    const r = await api.admin('POST', '/v1/tasks/batch', { body: { tasks } });
    expect(r.status).toBe(400);
    expect(r.body.error.details.map((d: { path: string }) => d.path)).toEqual(['tasks.3.runAt', 'tasks.7.delay']);
    expect(await count()).toBe(0);

    const types = await api.admin('POST', '/v1/tasks/batch', {
      body: { tasks: [{ task: 'noop' }, { task: 'http', payload: { url: 'ftp://example.com/' } }, { task: 'nope' }] },
    });
    expect(types.status).toBe(400);
    expect(types.body.error.details.map((d: { path: string }) => d.path)).toEqual(['tasks.1.payload.url', 'tasks.2.task']);
    expect(await count()).toBe(0);
  });

  it('refuses more than 1,000 tasks and an empty batch', async () => {
    const big = await api.admin('POST', '/v1/tasks/batch', { body: { tasks: Array.from({ length: 1001 }, () => ({ task: 'noop' })) } });
    expect(big.status).toBe(400);
    expect(big.body.error.details[0].path).toBe('tasks');
    const empty = await api.admin('POST', '/v1/tasks/batch', { body: { tasks: [] } });
    expect(empty.status).toBe(400);
    expect(await count()).toBe(0);
  });

  it('honours idempotency keys per item', async () => {
    const first = await api.admin('POST', '/v1/tasks/batch', { body: { tasks: [{ task: 'noop', idempotencyKey: 'a', delay: 60 }] } });
    const second = await api.admin('POST', '/v1/tasks/batch', {
      body: { tasks: [{ task: 'noop', idempotencyKey: 'a', delay: 120 }, { task: 'noop', idempotencyKey: 'b' }] },
    });
    expect(second.status).toBe(201);
    expect(second.body.tasks[0].id).toBe(first.body.tasks[0].id);
    expect(await count()).toBe(2);
  });
});

describe('limits', () => {
  it('answers 413 for a payload over the cap and for a body over 1 MiB, storing nothing', async () => {
    api = createTestApi(t.db, { config: { maxPayloadBytes: 1000 } });
    const big = await api.admin('POST', '/v1/tasks', { body: { task: 'noop', payload: { blob: 'x'.repeat(2000) } } });
    expect(big.status).toBe(413);
    expect(big.body.error).toMatchObject({ code: 'payload_too_large', details: [{ path: 'payload' }] });
    const huge = await api.admin('POST', '/v1/tasks', { raw: JSON.stringify({ task: 'noop', payload: { blob: 'x'.repeat(1_100_000) } }) });
    expect(huge.status).toBe(413);
    expect(huge.body.error.code).toBe('payload_too_large');
    expect(await count()).toBe(0);
  });

  it('counts the payload cap in UTF-8 bytes: 2, 3 and 4-byte characters to the byte', async () => {
    api = createTestApi(t.db, { config: { maxPayloadBytes: 1000 } });
    // {"blob":"…"} is 11 bytes around the string: 300 × 3 + 22 × 4 + 1 = 989 bytes in 345 code units.
    const blob = '€'.repeat(300) + '😀'.repeat(22) + 'x';
    expect(utf8Length(JSON.stringify({ blob }))).toBe(1000);
    const fits = await api.admin('POST', '/v1/tasks', { body: { task: 'noop', payload: { blob } } });
    expect(fits.status).toBe(201);
    const over = await api.admin('POST', '/v1/tasks', { body: { task: 'noop', payload: { blob: `${blob}é` } } });
    expect(over.status).toBe(413);
    expect(over.body.error.details).toEqual([{ path: 'payload', message: '1002 bytes; at most 1000' }]);
    expect(await count()).toBe(1);
    // As TextEncoder counts, a lone surrogate as U+FFFD (3 bytes).
    for (const text of ['', 'ascii', 'é€😀', '\ud800', 'a\udfffb', '\ud83d\ude00\ud83d', 'ß'.repeat(1000)]) {
      expect(utf8Length(text), JSON.stringify(text)).toBe(new TextEncoder().encode(text).length);
    }
  });

  it('refuses unknown fields, out-of-range values and a body that is not JSON', async () => {
    const cases: [unknown, string][] = [
      [{ task: 'noop', extra: true }, 'extra'],
      [{ task: 'noop', maxAttempts: 0 }, 'maxAttempts'],
      [{ task: 'noop', maxAttempts: 101 }, 'maxAttempts'],
      [{ task: 'noop', delay: 400 * 86_400 }, 'delay'],
      [{ task: 'noop', runAt: '1970-01-01T00:00:00Z' }, 'runAt'],
      [{ task: 'noop', runAt: '2030-01-01T00:00:00Z', delay: 5 }, 'delay'],
      [{ task: 'noop', idempotencyKey: 'k'.repeat(300) }, 'idempotencyKey'],
      [{ task: 'noop', queue: 'bad queue' }, 'queue'],
      [{ task: 'noop', timeout: 0 }, 'timeout'],
      // An attempt plus the consumer's early wait must fit a consumer's 15-minute wall clock.
      [{ task: 'noop', timeout: 781 }, 'timeout'],
      [{ task: 'noop', timeout: 900 }, 'timeout'],
      [{ task: 'noop', delivery: 'exactly_once' }, 'delivery'],
      [{ task: 'noop', backoff: { base: 10, max: 5 } }, 'backoff.max'],
      [[1, 2], 'body'],
    ];
    for (const [body, field] of cases) {
      const r = await api.admin('POST', '/v1/tasks', { body });
      expect(r.status, JSON.stringify(body)).toBe(400);
      expect(r.body.error.details.map((d: { path: string }) => d.path), JSON.stringify(body)).toContain(field);
    }
    const notJson = await api.admin('POST', '/v1/tasks', { raw: '{"task": "noop",' });
    expect(notJson.status).toBe(400);
    expect(notJson.body.error.details).toEqual([{ path: 'body', message: 'malformed JSON' }]);
    const noType = await api.admin('POST', '/v1/tasks', { raw: '{"task":"noop"}', headers: { 'content-type': 'text/plain' } });
    expect(noType.status).toBe(415);
    expect(await count()).toBe(0);
  });
});

describe('GET /v1/tasks', () => {
  it('pages newest first with a keyset cursor, and filters', async () => {
    await api.admin('POST', '/v1/tasks/batch', {
      body: { tasks: Array.from({ length: 120 }, (_, i) => ({ task: 'noop', queue: i % 2 ? 'odd' : 'even', delay: 3600 })) },
    });
    const seen: string[] = [];
    let cursor: string | null = null;
    const sizes: number[] = [];
    do {
      const r = await api.admin('GET', `/v1/tasks?limit=50${cursor ? `&cursor=${cursor}` : ''}`);
      expect(r.status).toBe(200);
      sizes.push(r.body.tasks.length);
      seen.push(...r.body.tasks.map((x: { id: string }) => x.id));
      cursor = r.body.nextCursor;
    } while (cursor);
    expect(sizes).toEqual([50, 50, 20]);
    expect(new Set(seen).size).toBe(120);
    expect(seen).toEqual([...seen].sort((a, b) => Number(b) - Number(a)));

    const odd = await api.admin('GET', '/v1/tasks?queue=odd&limit=500');
    expect(odd.body.tasks).toHaveLength(60);
    expect(odd.body.tasks.every((x: { queue: string }) => x.queue === 'odd')).toBe(true);
    await api.admin('DELETE', `/v1/tasks/${seen[0]}`);
    const cancelled = await api.admin('GET', '/v1/tasks?status=cancelled,dead');
    expect(cancelled.body.tasks.map((x: { id: string }) => x.id)).toEqual([seen[0]]);
    const none = await api.admin('GET', '/v1/tasks?task=http');
    expect(none.body).toEqual({ tasks: [], nextCursor: null });
    const future = await api.admin('GET', '/v1/tasks?createdAfter=2100-01-01T00:00:00Z');
    expect(future.body.tasks).toEqual([]);
  });

  it('refuses a forged cursor, an unknown status and unknown parameters', async () => {
    for (const [q, field] of [
      ['cursor=bm9wZQ', 'cursor'],
      ['status=lost', 'status'],
      ['limit=0', 'limit'],
      ['order=asc', 'order'],
    ]) {
      const r = await api.admin('GET', `/v1/tasks?${q}`);
      expect(r.status, q).toBe(400);
      expect(r.body.error.details.map((d: { path: string }) => d.path), q).toContain(field);
    }
  });
});
